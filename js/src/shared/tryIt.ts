/**
 * "Try it" in a job's checkpoint list: chat with a checkpoint (`POST .../jobs/{name}/chat`). Generation runs on
 * the cluster, never in the browser or the Jupyter server; the answer appears as it is generated. One instance
 * per detail view keeps the panel (prompt, settings, last answer) across the view's re-renders.
 */
import { CSS_PREFIX, h } from './format';
import { ICheckpoint, IJobDetail } from './model';

const CLASS = `${CSS_PREFIX}-JobDetail-tryIt`;

/** What a chat asks (the body of `POST .../chat`). */
export interface IChatRequest {
  prompt: string;
  sources: string[];
  max_new_tokens: number;
  temperature: number;
  top_p: number;
  serve: 'merged' | 'adapter';
}

/** One checkpoint's answer. */
export interface IChatAnswer {
  label: string;
  text: string;
  served_as?: string;
  new_tokens?: number;
  seconds?: number;
}

/** Runs a chat: `onText` receives the answer's pieces as they are generated. */
export type ChatFn = (
  job: IJobDetail,
  request: IChatRequest,
  onText: (index: number, text: string) => void
) => Promise<IChatAnswer[]>;

export class TryIt {
  constructor(run: ChatFn) {
    this._run = run;
    this._title = h('div', { class: `${CLASS}-title` });
    this._prompt = h('textarea', {
      class: `jp-mod-styled ${CLASS}-prompt`,
      rows: '3',
      placeholder: 'Ask something',
      'aria-label': 'Prompt'
    });
    this._maxNew = Private.number('max new tokens', '64', '1', '4096', '1');
    this._temperature = Private.number('temperature', '0', '0', '5', '0.1');
    this._topP = Private.number('top-p', '1', '0.01', '1', '0.05');
    this._serve = h(
      'select',
      { class: `jp-mod-styled ${CLASS}-serve`, 'aria-label': 'Serve the LoRA checkpoint as' },
      h('option', { value: 'merged' }, 'merged weights'),
      h('option', { value: 'adapter' }, 'base + adapter')
    );
    this._ask = h('button', { type: 'button', class: `${CSS_PREFIX}-button jp-mod-accept ${CLASS}-ask` }, 'Ask');
    this._ask.addEventListener('click', () => void this.ask());
    this._answer = h('pre', { class: `${CLASS}-answer`, 'aria-live': 'polite' });
    this._status = h('div', { class: `${CLASS}-status`, role: 'status' });
    this._serveLabel = h('label', null, 'serve ', this._serve);
    this.node = h(
      'div',
      { class: CLASS },
      this._title,
      this._prompt,
      h(
        'div',
        { class: `${CLASS}-settings` },
        h('label', null, 'max new tokens ', this._maxNew),
        h('label', null, 'temperature ', this._temperature),
        h('label', null, 'top-p ', this._topP),
        this._serveLabel
      ),
      this._ask,
      this._answer,
      this._status
    );
    this.node.style.display = 'none';
  }

  /** The panel (shown once a checkpoint's "Try it" is clicked). */
  readonly node: HTMLDivElement;

  /** The checkpoint's "Try it" button. */
  button(job: IJobDetail, checkpoint: ICheckpoint): HTMLButtonElement {
    const b = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button ${CLASS}-button`, title: `Chat with ${checkpoint.name} (runs on the cluster)` },
      'Try it'
    );
    b.addEventListener('click', () => this.open(job, checkpoint));
    return b;
  }

  /** Show the panel for `checkpoint` of `job`. */
  open(job: IJobDetail, checkpoint: ICheckpoint): void {
    this._job = job;
    this._checkpoint = checkpoint;
    const template = job.plan?.chat_template;
    this._title.textContent =
      `Try ${checkpoint.name}` + (template ? ` \u00b7 the job's chat template (${template})` : '');
    this._serveLabel.style.display = checkpoint.adapter_path ? '' : 'none';
    if (!checkpoint.adapter_path) {
      this._serve.value = 'merged';
    }
    this.node.style.display = '';
    this.node.dataset.checkpoint = checkpoint.name;
    this._prompt.focus();
  }

  /** Ask the open checkpoint the prompt; the answer streams into the panel. */
  async ask(): Promise<void> {
    const job = this._job;
    const checkpoint = this._checkpoint;
    const prompt = this._prompt.value.trim();
    if (!job || !checkpoint || this._busy) {
      return;
    }
    if (!prompt) {
      this._setStatus('Write a prompt first.', 'error');
      return;
    }
    this._busy = true;
    this._ask.disabled = true;
    this._answer.textContent = '';
    this._setStatus(`Generating with ${checkpoint.name} on the cluster\u2026`, 'running');
    try {
      const answers = await this._run(
        job,
        {
          prompt,
          sources: [checkpoint.name],
          max_new_tokens: Number(this._maxNew.value) || 64,
          temperature: Number(this._temperature.value) || 0,
          top_p: Number(this._topP.value) || 1,
          serve: this._serve.value === 'adapter' ? 'adapter' : 'merged'
        },
        (_index, text) => {
          this._answer.textContent += text;
        }
      );
      const a = answers[0];
      if (a) {
        this._answer.textContent = a.text;
        const parts = [a.served_as, a.new_tokens != null ? `${a.new_tokens} tokens` : null,
          a.seconds != null ? `${a.seconds.toFixed(1)} s` : null];
        this._setStatus(`${checkpoint.name}: ` + parts.filter(Boolean).join(' \u00b7 '), 'done');
      }
    } catch (err) {
      this._setStatus(`The chat failed: ${err instanceof Error ? err.message : String(err)}`, 'error');
    } finally {
      this._busy = false;
      this._ask.disabled = false;
    }
  }

  private _setStatus(text: string, state: string): void {
    this._status.textContent = text;
    this._status.dataset.state = state;
  }

  private readonly _run: ChatFn;
  private readonly _title: HTMLDivElement;
  private readonly _prompt: HTMLTextAreaElement;
  private readonly _maxNew: HTMLInputElement;
  private readonly _temperature: HTMLInputElement;
  private readonly _topP: HTMLInputElement;
  private readonly _serve: HTMLSelectElement;
  private readonly _serveLabel: HTMLLabelElement;
  private readonly _ask: HTMLButtonElement;
  private readonly _answer: HTMLPreElement;
  private readonly _status: HTMLDivElement;
  private _job: IJobDetail | null = null;
  private _checkpoint: ICheckpoint | null = null;
  private _busy = false;
}

namespace Private {
  export function number(label: string, value: string, min: string, max: string, step: string): HTMLInputElement {
    return h('input', { type: 'number', class: `jp-mod-styled ${CLASS}-number`, 'aria-label': label, value, min, max, step });
  }
}
