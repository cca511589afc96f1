// @vitest-environment node
/**
 * The checked-in generated types are what their checked-in JSON Schemas compile to
 * (tests/unit/test_generated_types.py checks that the schemas are what the pydantic models export).
 * On a failure: `python -m jupyter_cleverthis.schemas js/src/shared/generated && cd js && npm run build:types`.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { GENERATED_DIR, TARGETS, generate } from '../scripts/build-types.mjs';

describe('generated types', () => {
  for (const { schema, module } of TARGETS) {
    it(`src/shared/generated/${module} is compiled from ${schema}`, async () => {
      const checkedIn = readFileSync(join(GENERATED_DIR, module), 'utf8');
      expect(checkedIn, `stale: run \`npm run build:types\``).toBe(await generate(schema));
    });
  }

  it('names no property type (pydantic titles every property)', async () => {
    const api = readFileSync(join(GENERATED_DIR, 'api.ts'), 'utf8');
    expect(api).toContain('export interface JobDetail {');
    expect(api).not.toMatch(/export type (BaseModel|Name1?|Epochs)\b/);
  });
});
