import { describe, expect, it, vi } from 'vitest';

import { serverPath } from '../src/dataLines';
import { CreateJobForm, JobDetailView, TransportError } from '../src/shared';
import { SCHEMA_BUNDLE, makeDetail } from './fixtures';

const LINE = { path: '/srv/work/data/train.jsonl', line: 3, text: '{"messages": [' };

describe('a dataset error names its line', () => {
  it('maps a path to the server root, or to nothing outside it', () => {
    expect(serverPath('/srv/work', '/srv/work/data/train.jsonl')).toBe('data/train.jsonl');
    expect(serverPath('/srv/work/', '/srv/work/a.jsonl')).toBe('a.jsonl');
    expect(serverPath('/srv/work', '/srv/workshop/a.jsonl')).toBeNull(); // a sibling folder, not inside
    expect(serverPath('/srv/work', '/srv/work/../etc/passwd')).toBeNull();
    expect(serverPath('/srv/work', 's3://bucket/a.jsonl')).toBeNull();
    expect(serverPath(null, '/srv/work/a.jsonl')).toBeNull();
  });

  it("shows a failed job's line and offers to open it only where the server can", () => {
    const open = vi.fn();
    const canOpen = vi.fn((p: string) => p.startsWith('/srv/work/'));
    const view = new JobDetailView({ dataLines: { canOpen, open } });
    view.setJob(makeDetail({ status: 'failed', error: 'broken JSON', error_kind: 'dataset', error_line: LINE }));
    const el = view.node.querySelector('.jp-CleverThis-dataLine') as HTMLElement;
    expect(el.querySelector('.jp-CleverThis-dataLine-where')!.textContent).toBe('/srv/work/data/train.jsonl:3');
    expect(el.querySelector('.jp-CleverThis-dataLine-text')!.textContent).toBe('{"messages": [');
    (el.querySelector('.jp-CleverThis-dataLine-open') as HTMLButtonElement).click();
    expect(open).toHaveBeenCalledWith(LINE);
    view.setJob(makeDetail({ status: 'failed', error_line: { ...LINE, path: '/nodes/disk/train.jsonl' } }));
    expect(view.node.querySelector('.jp-CleverThis-dataLine-where')!.textContent).toBe('/nodes/disk/train.jsonl:3');
    expect(view.node.querySelector('.jp-CleverThis-dataLine-open')).toBeNull(); // shown, not opened
    view.setJob(makeDetail({ status: 'failed', error_line: null, fixes: [] }));
    expect(view.node.querySelector('.jp-CleverThis-dataLine')).toBeNull();
  });

  it("puts the pre-flight's line under the dataset field of the create form", () => {
    const open = vi.fn();
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local', dataLines: { canOpen: () => true, open } });
    const err = new TransportError('dataset_path: bad line', 422, 'invalid_spec', {
      errors: [{ field: 'dataset_path', message: '/srv/work/data/train.jsonl line 3: broken JSON', ...LINE }]
    });
    form.showError(err);
    const row = form.node.querySelector('[data-field="dataset_path"]') as HTMLElement;
    expect(row.querySelector('.jp-CleverThis-fieldError')!.textContent).toContain('line 3: broken JSON');
    (row.querySelector('.jp-CleverThis-dataLine-open') as HTMLButtonElement).click();
    expect(open).toHaveBeenCalledWith(LINE);
  });
});
