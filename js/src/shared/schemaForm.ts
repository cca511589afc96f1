/**
 * Generate an HTML form from a JSON Schema (as produced by pydantic v2's
 * `model_json_schema()`): one row per property (`schemaFields.ts` describes
 * them), using its `title`, `description`, `default`, `enum` and bounds.
 * Values are validated client-side against the same keywords and
 * server-side errors can be shown under their field.
 */
import { CSS_PREFIX, h } from './format';
import { IFieldError, IJSONSchema } from './model';
import { IFieldDescriptor, ISchemaFormOptions, describeFields, parseFieldValue } from './schemaFields';

/** Result of reading a form. */
export interface IFormValue {
  value: Record<string, unknown>;
  errors: IFieldError[];
}

/** A form generated from a JSON Schema. */
export class SchemaForm {
  constructor(schema: IJSONSchema, options: ISchemaFormOptions = {}) {
    this.schema = schema;
    this.fields = describeFields(schema, options);
    this._idPrefix = options.idPrefix ?? `${CSS_PREFIX}-field-${Private.nextId()}`;
    this._formError = h('div', { class: `${CSS_PREFIX}-formError`, role: 'alert' });
    this._formError.style.display = 'none';
    this.node = h('div', { class: `${CSS_PREFIX}-SchemaForm` }, this._formError);
    for (const field of this.fields) {
      const row = this._renderField(field, options.values?.[field.name]);
      this._rows.set(field.name, row);
      this.node.appendChild(row);
    }
  }

  /** The root element. */
  readonly node: HTMLDivElement;
  /** The source schema. */
  readonly schema: IJSONSchema;
  /** The fields rendered, in order. */
  readonly fields: readonly IFieldDescriptor[];

  /** The row element of a field (`[data-field=name]`). */
  row(name: string): HTMLElement | null {
    return this._rows.get(name) ?? null;
  }

  /** The input element of a field. */
  input(name: string): HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement | null {
    return this._inputs.get(name) ?? null;
  }

  /** Show only the fields applicable to a job type (fields without `job_types` always show). */
  filterJobType(jobType: string | null): void {
    for (const field of this.fields) {
      const row = this._rows.get(field.name);
      if (row) {
        const visible = !jobType || !field.jobTypes || field.jobTypes.includes(jobType);
        row.style.display = visible ? '' : 'none';
        row.dataset.hidden = visible ? '' : 'true';
      }
    }
  }

  /** Set field values (unknown names ignored). */
  setValues(values: Record<string, unknown>): void {
    for (const field of this.fields) {
      if (Object.prototype.hasOwnProperty.call(values, field.name)) {
        this._setInput(field, values[field.name]);
      }
    }
  }

  /** Read the values; fields left empty and optional are omitted. Does not show errors. */
  getValue(): IFormValue {
    const value: Record<string, unknown> = {};
    const errors: IFieldError[] = [];
    for (const field of this.fields) {
      const row = this._rows.get(field.name);
      if (row?.dataset.hidden === 'true') {
        continue;
      }
      const input = this._inputs.get(field.name);
      if (!input) {
        continue;
      }
      const raw = field.kind === 'boolean' ? (input as HTMLInputElement).checked : input.value;
      const parsed = parseFieldValue(field, raw);
      if (parsed.error) {
        errors.push({ field: field.name, message: parsed.error });
      } else if (parsed.value !== undefined) {
        value[field.name] = parsed.value;
      }
    }
    return { value, errors };
  }

  /** Read and validate; shows the errors under their fields. */
  validate(): IFormValue {
    const result = this.getValue();
    this.setErrors(result.errors);
    return result;
  }

  /**
   * Show errors under their fields (replacing previous ones).  A dotted
   * field (`training_config.lr`) or one prefixed with `body.`/`spec.` is
   * matched on its first known segment; errors for unknown fields are shown
   * at the top of the form.  Returns the errors that matched no field.
   */
  setErrors(errors: readonly IFieldError[], formMessage?: string): IFieldError[] {
    this.clearErrors();
    const unmatched: IFieldError[] = [];
    for (const error of errors) {
      const name = this.matchField(error.field);
      const row = name ? this._rows.get(name) : undefined;
      if (row) {
        Private.addFieldError(row, error.field !== name ? `${error.field}: ${error.message}` : error.message);
      } else {
        unmatched.push(error);
      }
    }
    const messages = [
      ...(formMessage ? [formMessage] : []),
      ...unmatched.map(e => (e.field ? `${e.field}: ${e.message}` : e.message))
    ];
    if (messages.length) {
      this._formError.replaceChildren(...messages.map(m => h('div', null, m)));
      this._formError.style.display = '';
    }
    return unmatched;
  }

  /** Remove all error messages. */
  clearErrors(): void {
    for (const row of this._rows.values()) {
      Private.clearFieldError(row);
    }
    this._formError.replaceChildren();
    this._formError.style.display = 'none';
  }

  /** The name of the field an error path refers to, if any. */
  matchField(path: string): string | null {
    const parts = String(path ?? '')
      .split(/[.[\]/]+/)
      .filter(Boolean);
    for (const part of parts) {
      if (this._rows.has(part)) {
        return part;
      }
    }
    return null;
  }

  /** Register an extra row (not generated from the schema) so errors can target it. */
  registerRow(name: string, row: HTMLElement): void {
    row.dataset.field = name;
    this._rows.set(name, row);
  }

  private _renderField(field: IFieldDescriptor, initial: unknown): HTMLElement {
    const id = `${this._idPrefix}-${field.name}`;
    const row = h('div', {
      class: `${CSS_PREFIX}-field ${CSS_PREFIX}-field-${field.kind}`,
      'data-field': field.name
    });
    const input = Private.createInput(field, id);
    if (field.required) {
      input.setAttribute('aria-required', 'true');
    }
    const label = h(
      'label',
      { for: id, class: `${CSS_PREFIX}-fieldLabel` },
      field.title,
      field.required ? h('span', { class: `${CSS_PREFIX}-required`, title: 'required' }, ' *') : null
    );
    const hints = Private.hints(field);
    if (field.kind === 'boolean') {
      row.append(h('div', { class: `${CSS_PREFIX}-checkboxRow` }, input, label));
    } else {
      row.append(label, input);
    }
    if (field.description || hints) {
      const descId = `${id}-description`;
      input.setAttribute('aria-describedby', descId);
      row.appendChild(
        h(
          'div',
          { class: `${CSS_PREFIX}-fieldDescription`, id: descId },
          Private.joinSentences(field.description, hints)
        )
      );
    }
    input.addEventListener('input', () => Private.clearFieldError(row));
    input.addEventListener('change', () => Private.clearFieldError(row));
    this._inputs.set(field.name, input);
    this._setInput(field, initial !== undefined ? initial : field.default);
    return row;
  }

  private _setInput(field: IFieldDescriptor, value: unknown): void {
    const input = this._inputs.get(field.name);
    if (!input) {
      return;
    }
    switch (field.kind) {
      case 'boolean':
        (input as HTMLInputElement).checked = Boolean(value);
        break;
      case 'enum': {
        const index = (field.enum ?? []).findIndex(v => v === value);
        input.value = index >= 0 ? String(index) : '';
        break;
      }
      case 'json':
        input.value = value === undefined || value === null ? '' : JSON.stringify(value, null, 2);
        break;
      default:
        input.value = value === undefined || value === null ? '' : String(value);
    }
  }

  private _rows = new Map<string, HTMLElement>();
  private _inputs = new Map<string, HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>();
  private readonly _formError: HTMLDivElement;
  private readonly _idPrefix: string;
}

namespace Private {
  let counter = 0;

  /** The input element of a field, by its kind. */
  export function createInput(
    field: IFieldDescriptor,
    id: string
  ): HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement {
    switch (field.kind) {
      case 'boolean': {
        return h('input', { type: 'checkbox', id, name: field.name });
      }
      case 'enum': {
        const select = h('select', { id, name: field.name, class: 'jp-mod-styled' });
        if (field.nullable || !field.hasDefault) {
          select.appendChild(h('option', { value: '' }, field.required ? 'Choose\u2026' : '\u2014'));
        }
        (field.enum ?? []).forEach((value, i) => {
          select.appendChild(h('option', { value: String(i) }, String(value)));
        });
        return select;
      }
      case 'json': {
        return h('textarea', {
          id,
          name: field.name,
          class: `jp-mod-styled ${CSS_PREFIX}-json`,
          rows: 4,
          spellcheck: 'false'
        });
      }
      default: {
        const isNumber = field.kind === 'integer' || field.kind === 'number';
        const attrs: Record<string, string | number | undefined> = {
          id,
          name: field.name,
          class: 'jp-mod-styled',
          type: isNumber ? 'number' : 'text',
          step: field.kind === 'integer' ? 1 : field.kind === 'number' ? 'any' : undefined,
          min: isNumber ? lowerBound(field) : undefined,
          max: isNumber ? upperBound(field) : undefined,
          minlength: field.minLength,
          maxlength: field.maxLength,
          // Only when the browser accepts it: an invalid `pattern` attribute is ignored with a console
          // error (the value is still checked against the schema's pattern in `parseFieldValue`).
          pattern: field.pattern && isHtmlPattern(field.pattern) ? field.pattern : undefined,
          placeholder:
            field.hasDefault && field.default !== null && field.default !== undefined
              ? String(field.default)
              : undefined,
          autocomplete: 'off'
        };
        return h('input', attrs);
      }
    }
  }

  export function nextId(): number {
    return ++counter;
  }

  export function lowerBound(field: IFieldDescriptor): number | undefined {
    if (field.minimum !== undefined) {
      return field.minimum;
    }
    if (field.exclusiveMinimum !== undefined && field.kind === 'integer') {
      return Math.floor(field.exclusiveMinimum) + 1;
    }
    return undefined;
  }

  export function upperBound(field: IFieldDescriptor): number | undefined {
    if (field.maximum !== undefined) {
      return field.maximum;
    }
    if (field.exclusiveMaximum !== undefined && field.kind === 'integer') {
      return Math.ceil(field.exclusiveMaximum) - 1;
    }
    return undefined;
  }

  /** Join text fragments as sentences ("Workers count" + "At least 1." -> "Workers count. At least 1."). */
  export function joinSentences(...parts: (string | undefined)[]): string {
    return parts
      .map(p => (p ?? '').trim())
      .filter(Boolean)
      .map((p, i, all) => (i < all.length - 1 && !/[.!?:)]$/.test(p) ? `${p}.` : p))
      .join(' ');
  }

  export function hints(field: IFieldDescriptor): string {
    const parts: string[] = [];
    const lo = field.minimum ?? field.exclusiveMinimum;
    const hi = field.maximum ?? field.exclusiveMaximum;
    if (lo !== undefined && hi !== undefined) {
      parts.push(`Range ${field.exclusiveMinimum !== undefined ? '(' : '['}${lo}, ${hi}${field.exclusiveMaximum !== undefined ? ')' : ']'}.`);
    } else if (lo !== undefined) {
      parts.push(field.exclusiveMinimum !== undefined ? `Greater than ${lo}.` : `At least ${lo}.`);
    } else if (hi !== undefined) {
      parts.push(field.exclusiveMaximum !== undefined ? `Less than ${hi}.` : `At most ${hi}.`);
    }
    if (field.hasDefault && field.default !== null && field.default !== undefined && field.kind !== 'boolean') {
      parts.push(`Default: ${typeof field.default === 'object' ? JSON.stringify(field.default) : String(field.default)}.`);
    }
    return parts.join(' ');
  }

  /**
   * Whether a pattern is valid as an HTML `pattern` attribute, which browsers
   * compile with the `v` flag: e.g. `[a-z_-]` (an unescaped `-` in a class,
   * common in JSON Schemas) is valid with `u` but not with `v`.
   */
  export function isHtmlPattern(pattern: string): boolean {
    try {
      new RegExp(`^(?:${pattern})$`, 'v');
      return true;
    } catch {
      return false;
    }
  }

  export function addFieldError(row: HTMLElement, message: string): void {
    let el = row.querySelector(`:scope > .${CSS_PREFIX}-fieldError`);
    if (!el) {
      el = h('div', { class: `${CSS_PREFIX}-fieldError`, role: 'alert' });
      row.appendChild(el);
      row.classList.add('jp-mod-error');
      row.querySelector('input, select, textarea')?.setAttribute('aria-invalid', 'true');
      el.textContent = message;
    } else {
      el.textContent = `${el.textContent}\n${message}`;
    }
  }

  export function clearFieldError(row: HTMLElement): void {
    row.querySelectorAll(`:scope > .${CSS_PREFIX}-fieldError`).forEach(el => el.remove());
    row.classList.remove('jp-mod-error');
    row.querySelector('[aria-invalid]')?.removeAttribute('aria-invalid');
  }
}
