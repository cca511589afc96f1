/**
 * Generate an HTML form from a JSON Schema (as produced by pydantic v2's
 * `model_json_schema()`): one row per property, using its `title`,
 * `description`, `default`, `enum`, `minimum`/`maximum` (and the exclusive
 * variants), `minLength`/`maxLength` and `pattern`.  `$ref`/`$defs`,
 * single-element `allOf` and `anyOf: [X, {type: "null"}]` (Optional[X]) are
 * resolved.  Values are validated client-side against the same keywords and
 * server-side errors can be shown under their field.
 */
import { CSS_PREFIX, h } from './format';
import { IFieldError, IJSONSchema } from './model';

/** The widget a field is rendered with. */
export type FieldKind = 'string' | 'integer' | 'number' | 'boolean' | 'enum' | 'json';

/** A schema property, resolved and ready to render. */
export interface IFieldDescriptor {
  name: string;
  kind: FieldKind;
  title: string;
  description?: string;
  default?: unknown;
  hasDefault: boolean;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  /** Listed in the schema's `required`. */
  required: boolean;
  /** `null` is an accepted value. */
  nullable: boolean;
  /** Only shown for these job types (schema extension `job_types` / `x-job-types`). */
  jobTypes?: string[];
  /** The resolved schema of the property. */
  schema: IJSONSchema;
}

/** Options of {@link describeFields} and {@link SchemaForm}. */
export interface ISchemaFormOptions {
  /** Properties not to render (e.g. set by the caller). */
  exclude?: readonly string[];
  /** Initial values, overriding the schema defaults. */
  values?: Record<string, unknown>;
  /** Prefix of the generated element ids (default `jp-CleverThis-field`). */
  idPrefix?: string;
}

/** Result of reading a form. */
export interface IFormValue {
  value: Record<string, unknown>;
  errors: IFieldError[];
}

/** Turn "batch_size" into "Batch size". */
export function humanize(name: string): string {
  const words = name.replace(/[_-]+/g, ' ').replace(/([a-z])([A-Z])/g, '$1 $2').trim();
  return words ? words[0].toUpperCase() + words.slice(1) : name;
}

/**
 * Resolve `$ref` (local `#/$defs/...` or `#/definitions/...`), merge `allOf`
 * and unwrap `anyOf`/`oneOf` with a `null` branch.  Returns the resolved
 * schema and whether null is allowed.  Sibling keywords (title, default,
 * description...) of the referencing schema win over the referenced ones.
 */
export function resolveSchema(
  root: IJSONSchema,
  schema: IJSONSchema,
  depth = 0
): { schema: IJSONSchema; nullable: boolean } {
  if (depth > 16) {
    return { schema, nullable: false };
  }
  let nullable = false;
  let current: IJSONSchema = { ...schema };

  if (typeof current.$ref === 'string') {
    const target = Private.lookupRef(root, current.$ref);
    const { $ref: _ref, ...rest } = current;
    void _ref;
    if (target) {
      const resolved = resolveSchema(root, target, depth + 1);
      nullable = nullable || resolved.nullable;
      current = { ...resolved.schema, ...rest };
    } else {
      current = rest;
    }
  }
  if (Array.isArray(current.allOf)) {
    const { allOf, ...rest } = current;
    let merged: IJSONSchema = {};
    for (const part of allOf) {
      const resolved = resolveSchema(root, part, depth + 1);
      nullable = nullable || resolved.nullable;
      merged = { ...merged, ...resolved.schema };
    }
    current = { ...merged, ...rest };
  }
  for (const key of ['anyOf', 'oneOf'] as const) {
    const options = current[key];
    if (!Array.isArray(options)) {
      continue;
    }
    const nonNull = options.filter(o => !Private.isNullSchema(o));
    if (nonNull.length < options.length) {
      nullable = true;
    }
    if (nonNull.length === 1) {
      const { [key]: _alts, ...rest } = current;
      void _alts;
      const resolved = resolveSchema(root, nonNull[0], depth + 1);
      nullable = nullable || resolved.nullable;
      current = { ...resolved.schema, ...rest };
    } else {
      current = { ...current, [key]: nonNull.map(o => resolveSchema(root, o, depth + 1).schema) };
    }
  }
  if (Array.isArray(current.type)) {
    const types = current.type.filter(t => t !== 'null');
    if (types.length < current.type.length) {
      nullable = true;
    }
    current = { ...current, type: types.length === 1 ? types[0] : types };
  }
  if (Array.isArray(current.enum) && current.enum.includes(null)) {
    nullable = true;
    current = { ...current, enum: current.enum.filter(v => v !== null) };
  }
  return { schema: current, nullable };
}

/** Describe the properties of an object schema, in declaration order. */
export function describeFields(
  root: IJSONSchema,
  options: ISchemaFormOptions = {}
): IFieldDescriptor[] {
  const top = resolveSchema(root, root).schema;
  const required = new Set(top.required ?? []);
  const exclude = new Set(options.exclude ?? []);
  const fields: IFieldDescriptor[] = [];
  for (const [name, raw] of Object.entries(top.properties ?? {})) {
    if (exclude.has(name)) {
      continue;
    }
    const { schema, nullable } = resolveSchema(root, raw);
    if (schema.readOnly) {
      continue;
    }
    const kind = Private.kindOf(schema);
    const jobTypes = schema['job_types'] ?? schema['x-job-types'];
    const hasDefault = Object.prototype.hasOwnProperty.call(schema, 'default');
    fields.push({
      name,
      kind,
      title: typeof schema.title === 'string' && schema.title ? schema.title : humanize(name),
      description: typeof schema.description === 'string' ? schema.description : undefined,
      default: schema.default,
      hasDefault,
      enum:
        kind === 'enum'
          ? (schema.enum ?? (schema.const !== undefined ? [schema.const] : []))
          : undefined,
      minimum: Private.num(schema.minimum),
      maximum: Private.num(schema.maximum),
      exclusiveMinimum: Private.num(schema.exclusiveMinimum),
      exclusiveMaximum: Private.num(schema.exclusiveMaximum),
      minLength: Private.num(schema.minLength),
      maxLength: Private.num(schema.maxLength),
      pattern: typeof schema.pattern === 'string' ? schema.pattern : undefined,
      required: required.has(name) && !hasDefault,
      nullable,
      jobTypes: Array.isArray(jobTypes) ? jobTypes.map(String) : undefined,
      schema
    });
  }
  return fields;
}

/**
 * Convert the raw text of an input into a value of the field, or an error
 * message.  `undefined` means "not set" (omitted from the spec).
 */
export function parseFieldValue(
  field: IFieldDescriptor,
  raw: string | boolean
): { value?: unknown; error?: string } {
  if (field.kind === 'boolean') {
    return { value: Boolean(raw) };
  }
  const text = typeof raw === 'string' ? raw : String(raw);
  if (field.kind === 'enum') {
    if (text === '') {
      return field.required && !field.nullable ? { error: 'Choose a value.' } : {};
    }
    const index = Number(text);
    const values = field.enum ?? [];
    if (!Number.isInteger(index) || index < 0 || index >= values.length) {
      return { error: 'Choose one of the listed values.' };
    }
    return { value: values[index] };
  }
  if (text.trim() === '') {
    if (field.required) {
      return { error: 'This field is required.' };
    }
    return {};
  }
  let value: unknown;
  switch (field.kind) {
    case 'integer':
    case 'number': {
      const n = Number(text.trim());
      if (!Number.isFinite(n)) {
        return { error: 'Enter a number.' };
      }
      if (field.kind === 'integer' && !Number.isInteger(n)) {
        return { error: 'Enter a whole number.' };
      }
      const range = Private.checkRange(field, n);
      if (range) {
        return { error: range };
      }
      value = n;
      break;
    }
    case 'json': {
      try {
        value = JSON.parse(text);
      } catch (err) {
        return { error: `Invalid JSON: ${err instanceof Error ? err.message : String(err)}` };
      }
      const type = field.schema.type;
      if (type === 'object' && (typeof value !== 'object' || value === null || Array.isArray(value))) {
        return { error: 'Enter a JSON object ({...}).' };
      }
      if (type === 'array' && !Array.isArray(value)) {
        return { error: 'Enter a JSON array ([...]).' };
      }
      break;
    }
    default: {
      if (field.minLength !== undefined && text.length < field.minLength) {
        return { error: `Enter at least ${field.minLength} characters.` };
      }
      if (field.maxLength !== undefined && text.length > field.maxLength) {
        return { error: `Enter at most ${field.maxLength} characters.` };
      }
      if (field.pattern) {
        const re = Private.regexp(field.pattern);
        if (re && !re.test(text)) {
          return { error: `Must match the pattern ${field.pattern}` };
        }
      }
      value = text;
    }
  }
  return { value };
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
    let input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;
    switch (field.kind) {
      case 'boolean': {
        input = h('input', { type: 'checkbox', id, name: field.name });
        break;
      }
      case 'enum': {
        const select = h('select', { id, name: field.name, class: 'jp-mod-styled' });
        if (field.nullable || !field.hasDefault) {
          select.appendChild(h('option', { value: '' }, field.required ? 'Choose\u2026' : '\u2014'));
        }
        (field.enum ?? []).forEach((value, i) => {
          select.appendChild(h('option', { value: String(i) }, String(value)));
        });
        input = select;
        break;
      }
      case 'json': {
        input = h('textarea', {
          id,
          name: field.name,
          class: `jp-mod-styled ${CSS_PREFIX}-json`,
          rows: 4,
          spellcheck: 'false'
        });
        break;
      }
      default: {
        const isNumber = field.kind === 'integer' || field.kind === 'number';
        const attrs: Record<string, string | number | undefined> = {
          id,
          name: field.name,
          class: 'jp-mod-styled',
          type: isNumber ? 'number' : 'text',
          step: field.kind === 'integer' ? 1 : field.kind === 'number' ? 'any' : undefined,
          min: isNumber ? Private.lowerBound(field) : undefined,
          max: isNumber ? Private.upperBound(field) : undefined,
          minlength: field.minLength,
          maxlength: field.maxLength,
          // Only when the browser accepts it: an invalid `pattern` attribute is ignored with a console
          // error (the value is still checked against the schema's pattern in `parseFieldValue`).
          pattern: field.pattern && Private.isHtmlPattern(field.pattern) ? field.pattern : undefined,
          placeholder:
            field.hasDefault && field.default !== null && field.default !== undefined
              ? String(field.default)
              : undefined,
          autocomplete: 'off'
        };
        input = h('input', attrs);
      }
    }
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

  export function nextId(): number {
    return ++counter;
  }

  export function num(value: unknown): number | undefined {
    return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
  }

  export function isNullSchema(schema: IJSONSchema): boolean {
    return schema.type === 'null' || (Array.isArray(schema.enum) && schema.enum.length === 1 && schema.enum[0] === null);
  }

  export function lookupRef(root: IJSONSchema, ref: string): IJSONSchema | null {
    if (!ref.startsWith('#/')) {
      return null;
    }
    let node: unknown = root;
    for (const raw of ref.slice(2).split('/')) {
      const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
      if (typeof node !== 'object' || node === null || !(key in node)) {
        return null;
      }
      node = (node as Record<string, unknown>)[key];
    }
    return typeof node === 'object' && node !== null ? (node as IJSONSchema) : null;
  }

  export function kindOf(schema: IJSONSchema): FieldKind {
    if (Array.isArray(schema.enum) && schema.enum.length) {
      return 'enum';
    }
    if (schema.const !== undefined) {
      return 'enum';
    }
    const type = Array.isArray(schema.type) ? undefined : schema.type;
    switch (type) {
      case 'boolean':
        return 'boolean';
      case 'integer':
        return 'integer';
      case 'number':
        return 'number';
      case 'string':
        return 'string';
      case 'object':
      case 'array':
        return 'json';
      default:
        break;
    }
    // Union of several types (or none given): a free text box when all are
    // strings/numbers, JSON otherwise.
    const alternatives = schema.anyOf ?? schema.oneOf;
    if (Array.isArray(alternatives) && alternatives.every(a => a.type === 'string')) {
      return 'string';
    }
    return type === undefined && !alternatives ? 'string' : 'json';
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

  export function checkRange(field: IFieldDescriptor, n: number): string | null {
    if (field.minimum !== undefined && n < field.minimum) {
      return `Must be at least ${field.minimum}.`;
    }
    if (field.exclusiveMinimum !== undefined && n <= field.exclusiveMinimum) {
      return `Must be greater than ${field.exclusiveMinimum}.`;
    }
    if (field.maximum !== undefined && n > field.maximum) {
      return `Must be at most ${field.maximum}.`;
    }
    if (field.exclusiveMaximum !== undefined && n >= field.exclusiveMaximum) {
      return `Must be less than ${field.exclusiveMaximum}.`;
    }
    return null;
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

  /** Compile a JSON-Schema pattern (ECMA-262 dialect, unanchored); null if JS cannot parse it. */
  export function regexp(pattern: string): RegExp | null {
    try {
      return new RegExp(pattern, 'u');
    } catch {
      try {
        return new RegExp(pattern);
      } catch {
        return null;
      }
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
