/**
 * A small read-only log view that keeps following the end of the log while
 * the user has not scrolled up.
 */
import { CSS_PREFIX, h } from './format';

/** Options of {@link LogView}. */
export interface ILogViewOptions {
  /** Keep at most this many trailing characters (default 200,000). */
  maxChars?: number;
  /** Text shown for an empty log. */
  emptyText?: string;
}

export class LogView {
  constructor(options: ILogViewOptions = {}) {
    this._maxChars = options.maxChars ?? 200_000;
    this._emptyText = options.emptyText ?? 'No log output yet.';
    this._pre = h('pre', { class: `${CSS_PREFIX}-LogView-text` });
    this.node = h('div', { class: `${CSS_PREFIX}-LogView` }, this._pre);
    this._pre.classList.add('jp-mod-empty');
    this._pre.textContent = this._emptyText;
  }

  readonly node: HTMLDivElement;

  /** The text shown (possibly truncated at the start). */
  get text(): string {
    return this._text;
  }

  /**
   * Replace the log text. A followed log mostly grows at its end: then only the new part is added to the page
   * (setting the whole ~200 KB again at each line made the browser lay all of it out again, many times a second,
   * and a loaded machine's renderer fell minutes behind). The shown text may grow to 1.5 times `maxChars` before
   * it is cut back to the last `maxChars`.
   */
  setText(text: string): void {
    const full = text ?? '';
    const added = full.length - this._source.length;
    if (
      this._text &&
      added > 0 &&
      this._text.length + added <= this._maxChars * 1.5 &&
      full.startsWith(this._source)
    ) {
      const follow = this._following();
      const delta = full.slice(this._source.length);
      this._source = full;
      this._text += delta;
      this._pre.append(delta);
      if (follow) {
        this._pre.scrollTop = this._pre.scrollHeight;
      }
      return;
    }
    let shown = full;
    let truncated = false;
    if (shown.length > this._maxChars) {
      shown = shown.slice(shown.length - this._maxChars);
      const newline = shown.indexOf('\n');
      if (newline >= 0 && newline < 1000) {
        shown = shown.slice(newline + 1);
      }
      truncated = true;
    }
    this._source = full;
    if (shown === this._text && truncated === this._truncated) {
      return;
    }
    const follow = this._following() || !this._text;
    this._text = shown;
    this._truncated = truncated;
    this._pre.classList.toggle('jp-mod-empty', !shown);
    this._pre.textContent = shown
      ? (truncated ? '\u2026 (earlier output truncated)\n' : '') + shown
      : this._emptyText;
    if (follow) {
      this._pre.scrollTop = this._pre.scrollHeight;
    }
  }

  /** Whether the view shows the end of the log (the user has not scrolled up). */
  private _following(): boolean {
    return this._pre.scrollHeight - this._pre.scrollTop - this._pre.clientHeight < 24;
  }

  dispose(): void {
    this.node.remove();
  }

  private _text = '';
  /** The whole text last given to setText (the shown text is its end). */
  private _source = '';
  private _truncated = false;
  private readonly _pre: HTMLPreElement;
  private readonly _maxChars: number;
  private readonly _emptyText: string;
}
