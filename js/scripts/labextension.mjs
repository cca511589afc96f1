#!/usr/bin/env node
// Build the prebuilt labextension with the Python `jupyter-builder` CLI
// (PyPI jupyter-builder, which drives the npm @jupyter/builder package).
// Uses `jupyter-builder` from PATH (the isolated build environment of
// `pip install`), else the repository's .venv.  Extra arguments are passed on
// (e.g. --development).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = resolve(here, '..');
const win = process.platform === 'win32';
const exe = win ? 'jupyter-builder.exe' : 'jupyter-builder';

function onPath() {
  for (const dir of (process.env.PATH || '').split(win ? ';' : ':')) {
    if (dir && existsSync(join(dir, exe))) {
      return join(dir, exe);
    }
  }
  return null;
}

const candidates = [
  onPath(),
  process.env.VIRTUAL_ENV ? join(process.env.VIRTUAL_ENV, win ? 'Scripts' : 'bin', exe) : null,
  join(pkgDir, '..', '.venv', win ? 'Scripts' : 'bin', exe)
].filter(p => p && existsSync(p));

if (!candidates.length) {
  console.error(
    'jupyter-builder not found: install the PyPI package "jupyter-builder" (pip install jupyter-builder) ' +
      'or activate the environment that has it.'
  );
  process.exit(1);
}

const result = spawnSync(candidates[0], ['build', pkgDir, ...process.argv.slice(2)], {
  stdio: 'inherit',
  cwd: pkgDir
});
if (result.error) {
  console.error(result.error.message);
  process.exit(1);
}
process.exit(result.status ?? 1);
