/**
 * "Open at line N" for a dataset error: the file opens in JupyterLab's text editor with the cursor
 * on that line, where the file lies under the folder the Jupyter server shows (`server_root` of
 * `GET /clusters`). A path elsewhere (a cluster node's disk, a bucket) is shown, not opened.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';

import { IDataLineOpener } from './shared';

/** `path` relative to the server's root (the contents API's path), or null where it lies outside. */
export function serverPath(root: string | null | undefined, path: string): string | null {
  if (!root || !path.startsWith('/') || path.split('/').includes('..')) {
    return null;
  }
  const base = root.endsWith('/') ? root : `${root}/`;
  return path.startsWith(base) && path.length > base.length ? path.slice(base.length) : null;
}

/** The opener of the job tabs and the create dialog; `root()` is read at each use (known once clusters load). */
export function dataLineOpener(app: JupyterFrontEnd, root: () => string | null): IDataLineOpener {
  return {
    canOpen: path => serverPath(root(), path) !== null,
    open: async line => {
      const path = serverPath(root(), line.path);
      if (path === null) {
        return;
      }
      const widget: any = await app.commands.execute('docmanager:open', { path, factory: 'Editor' });
      await widget?.context?.ready;
      const editor = widget?.content?.editor;
      if (editor) {
        const position = { line: Math.max(0, line.line - 1), column: 0 };
        editor.setCursorPosition(position);
        editor.revealPosition?.(position);
        editor.focus();
      }
    }
  };
}
