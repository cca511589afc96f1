/**
 * "Export merged" in a job's checkpoint list: a LoRA checkpoint written on the cluster as a standalone fp16/bf16
 * model folder (`POST .../jobs/{name}/export`). One instance per detail view keeps the precision choice, the
 * export in flight and its result across the view's re-renders.
 */
import { CSS_PREFIX, h } from './format';
import { ICheckpoint, IExportResult, IJobDetail } from './model';

const CLASS = `${CSS_PREFIX}-JobDetail-exportMerged`;

/** Runs an export: resolves with the folder written. */
export type ExportMergedFn = (job: IJobDetail, checkpoint: ICheckpoint, dtype: string) => Promise<IExportResult>;

export class ExportMerged {
  constructor(run: ExportMergedFn) {
    this._run = run;
    this._dtype = h(
      'select',
      { class: `jp-mod-styled ${CLASS}-dtype`, 'aria-label': 'Export precision', title: 'Precision of the exported weights' },
      h('option', { value: 'bf16' }, 'bf16'),
      h('option', { value: 'fp16' }, 'fp16')
    );
    this._status = h('div', { class: `${CLASS}-status`, role: 'status', 'aria-live': 'polite' });
    this.node = h('div', { class: CLASS }, h('label', null, 'Export merged as ', this._dtype), this._status);
  }

  /** The precision choice and the status line (shown under the list when a checkpoint can be exported). */
  readonly node: HTMLDivElement;

  /** Whether `checkpoint` gets an "Export merged" button: a LoRA checkpoint (its adapter beside merged weights). */
  static applies(checkpoint: ICheckpoint): boolean {
    return !!checkpoint.adapter_path;
  }

  /** The checkpoint's "Export merged" button (disabled while an export runs). */
  button(job: IJobDetail, checkpoint: ICheckpoint): HTMLButtonElement {
    const b = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button ${CLASS}-button`, title: `Write ${checkpoint.name} as a standalone model folder on the cluster` },
      'Export merged'
    );
    b.disabled = this._busy;
    b.addEventListener('click', () => void this._export(job, checkpoint));
    return b;
  }

  private async _export(job: IJobDetail, checkpoint: ICheckpoint): Promise<void> {
    if (this._busy) {
      return;
    }
    this._busy = true;
    this._setButtons(true);
    const dtype = this._dtype.value;
    this._status.textContent = `Exporting ${checkpoint.name} as ${dtype} on the cluster\u2026`;
    this._status.dataset.state = 'running';
    try {
      const r = await this._run(job, checkpoint, dtype);
      this._status.textContent = `Exported ${r.checkpoint} as ${r.dtype}: ${r.path}`;
      this._status.dataset.state = 'done';
    } catch (err) {
      this._status.textContent = `Export of ${checkpoint.name} failed: ${err instanceof Error ? err.message : String(err)}`;
      this._status.dataset.state = 'error';
    } finally {
      this._busy = false;
      this._setButtons(false);
    }
  }

  private _setButtons(disabled: boolean): void {
    const root = this.node.parentElement;
    root?.querySelectorAll<HTMLButtonElement>(`.${CLASS}-button`).forEach(b => (b.disabled = disabled));
  }

  private readonly _run: ExportMergedFn;
  private readonly _dtype: HTMLSelectElement;
  private readonly _status: HTMLDivElement;
  private _busy = false;
}
