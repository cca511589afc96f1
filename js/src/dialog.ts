/**
 * The Create Job dialog: a modal (styled with JupyterLab's `jp-Dialog`
 * classes) hosting the shared `CreateJobForm`.  Unlike `showDialog`, it stays
 * open when the server rejects the spec so each 422 error can be shown under
 * its field.
 */
import { Widget } from '@lumino/widgets';

import {
  CSS_PREFIX,
  CreateJobForm,
  IDataLineOpener,
  IJobDetail,
  ISchemaBundle,
  ITransport,
  JobType,
  errorMessage,
  h
} from './shared';

/** Options of {@link CreateJobDialog}. */
export interface ICreateJobDialogOptions {
  transport: ITransport;
  cluster: string;
  /** The schema bundle; fetched from the transport when omitted. */
  schema?: ISchemaBundle;
  jobType?: JobType;
  /** Initial field values. */
  values?: Record<string, unknown>;
  /** Where to attach the modal (default `document.body`). */
  host?: HTMLElement;
  /**
   * "Open at line N" for a dataset error under the dataset field. The modal closes to show the file; its values
   * go to `onSetAside` first (the next Create Job starts from them).
   */
  dataLines?: IDataLineOpener;
  onSetAside?: (values: Record<string, unknown>, jobType: JobType) => void;
}

export class CreateJobDialog extends Widget {
  constructor(options: ICreateJobDialogOptions) {
    super();
    this._options = options;
    this.addClass('jp-Dialog');
    this.addClass(`${CSS_PREFIX}-CreateJobDialog`);
    this.id = `${CSS_PREFIX}-createJobDialog`;

    this._body = h('div', { class: `jp-Dialog-body ${CSS_PREFIX}-dialogBody` }, 'Loading the job schema\u2026');
    this._submitButton = Private.button('Create', 'jp-mod-accept');
    this._cancelButton = Private.button('Cancel', 'jp-mod-reject');
    this._submitButton.disabled = true;
    const content = h(
      'div',
      { class: `jp-Dialog-content ${CSS_PREFIX}-dialogContent`, role: 'dialog', 'aria-modal': 'true', 'aria-label': 'Create Job' },
      h('div', { class: 'jp-Dialog-header' }, h('div', { class: 'jp-Dialog-title' }, 'Create Job')),
      this._body,
      h(
        'div',
        { class: 'jp-Dialog-footer' },
        h('div', { class: 'jp-Dialog-footerButtons' }, this._cancelButton, this._submitButton)
      )
    );
    this.node.appendChild(content);
    this._submitButton.addEventListener('click', () => void this.submit());
    this._cancelButton.addEventListener('click', () => this.finish(null));
    this.node.addEventListener('keydown', this._onKeyDown);
  }

  /** The form, once the schema has loaded. */
  get form(): CreateJobForm | null {
    return this._form;
  }

  /** Resolves with the created job, or null when the dialog was cancelled. */
  get result(): Promise<IJobDetail | null> {
    return this._result;
  }

  /** Attach the modal, load the schema and build the form. */
  async open(): Promise<IJobDetail | null> {
    this._returnFocus = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    Widget.attach(this, this._options.host ?? document.body);
    this._cancelButton.focus();
    try {
      const transport = this._options.transport;
      const [schema, templates] = await Promise.all([
        this._options.schema ?? transport.getSchema(),
        transport.listTemplates ? transport.listTemplates().catch(() => []) : Promise.resolve([])
      ]);
      if (this.isDisposed) {
        return this._result;
      }
      this._form = new CreateJobForm({
        schema,
        cluster: this._options.cluster,
        jobType: this._options.jobType,
        values: this._options.values,
        transport,
        templates,
        dataLines: this._dataLines()
      });
      this._body.replaceChildren(this._form.node);
      this._submitButton.disabled = false;
      const first = this._form.node.querySelector<HTMLElement>(
        `.${CSS_PREFIX}-SchemaForm input, .${CSS_PREFIX}-SchemaForm select`
      );
      (first ?? this._submitButton).focus();
    } catch (err) {
      this._body.replaceChildren(
        h('div', { class: `${CSS_PREFIX}-formError` }, `Cannot load the job schema: ${errorMessage(err)}`)
      );
    }
    return this._result;
  }

  /** The form's opener: set the values aside, close, then open the file (a modal would hide the editor). */
  private _dataLines(): IDataLineOpener | undefined {
    const opener = this._options.dataLines;
    return opener
      ? {
          canOpen: path => opener.canOpen(path),
          open: line => {
            const form = this._form;
            if (form) {
              this._options.onSetAside?.(form.values(), form.jobType);
            }
            this.finish(null);
            opener.open(line);
          }
        }
      : undefined;
  }

  /** Validate and send the spec; closes on success. */
  async submit(): Promise<IJobDetail | null> {
    if (!this._form || this._busy) {
      return null;
    }
    this._busy = true;
    this._submitButton.disabled = true;
    this._cancelButton.disabled = true;
    try {
      const created = await this._form.submit(this._options.transport);
      if (created) {
        this.finish(created);
      }
      return created;
    } finally {
      this._busy = false;
      if (!this.isDisposed) {
        this._submitButton.disabled = false;
        this._cancelButton.disabled = false;
      }
    }
  }

  /** Close the dialog, resolving {@link result}. */
  finish(value: IJobDetail | null): void {
    this._resolve(value);
    this.dispose();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.node.removeEventListener('keydown', this._onKeyDown);
    this._resolve(null);
    super.dispose();
    // focus goes back where it was when the dialog opened (the Create Job button, say)
    if (this._returnFocus?.isConnected) {
      this._returnFocus.focus();
    }
  }

  /** The dialog's focusable elements, in tab order (Tab and Shift+Tab cycle through them). */
  focusables(): HTMLElement[] {
    const selector = 'button, input, select, textarea, summary, a[href], [tabindex]:not([tabindex="-1"])';
    return Array.from(this.node.querySelectorAll<HTMLElement>(selector)).filter(
      el => !(el as HTMLButtonElement).disabled && el.tabIndex >= 0 && el.getClientRects().length > 0
    );
  }

  private _onKeyDown = (event: KeyboardEvent): void => {
    if (event.key === 'Tab') {
      // a modal keeps the focus inside: past the last element comes the first, and back
      const items = this.focusables();
      const active = document.activeElement as HTMLElement | null;
      const inside = !!active && items.includes(active);
      if (items.length && event.shiftKey && (!inside || active === items[0])) {
        event.preventDefault();
        items[items.length - 1].focus();
      } else if (items.length && !event.shiftKey && (!inside || active === items[items.length - 1])) {
        event.preventDefault();
        items[0].focus();
      }
    } else if (event.key === 'Escape') {
      event.preventDefault();
      event.stopPropagation();
      this.finish(null);
    } else if (
      event.key === 'Enter' &&
      !event.shiftKey &&
      event.target instanceof HTMLElement &&
      (event.target.tagName === 'INPUT' || event.target.tagName === 'SELECT')
    ) {
      event.preventDefault();
      void this.submit();
    }
  };

  private _form: CreateJobForm | null = null;
  private _busy = false;
  private _resolveFn: ((value: IJobDetail | null) => void) | null = null;
  private _result = new Promise<IJobDetail | null>(resolve => {
    this._resolveFn = resolve;
  });
  private _resolve(value: IJobDetail | null): void {
    const fn = this._resolveFn;
    this._resolveFn = null;
    fn?.(value);
  }
  private _returnFocus: HTMLElement | null = null;
  private readonly _options: ICreateJobDialogOptions;
  private readonly _body: HTMLDivElement;
  private readonly _submitButton: HTMLButtonElement;
  private readonly _cancelButton: HTMLButtonElement;
}

/** Open the Create Job dialog; resolves with the created job or null. */
export function showCreateJobDialog(options: ICreateJobDialogOptions): Promise<IJobDetail | null> {
  return new CreateJobDialog(options).open();
}

namespace Private {
  export function button(label: string, mod: string): HTMLButtonElement {
    return h(
      'button',
      { type: 'button', class: `jp-Dialog-button ${mod} jp-mod-styled` },
      h('div', { class: 'jp-Dialog-buttonLabel' }, label)
    );
  }
}
