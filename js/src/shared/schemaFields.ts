/**
 * The fields of a JSON Schema (as produced by pydantic v2's
 * `model_json_schema()`), resolved for a form: `$ref`/`$defs`, single-element
 * `allOf` and `anyOf: [X, {type: "null"}]` (Optional[X]) are resolved, and
 * values are parsed and validated against `minimum`/`maximum` (and the
 * exclusive variants), `minLength`/`maxLength` and `pattern`.  No DOM.
 */
import { IJSONSchema } from './model';

/** The widget a field is rendered with. */
export type FieldKind = 'string' | 'integer' | 'number' | 'boolean' | 'enum' | 'json';

/** The keywords of a property's schema that a field carries as they are (its value checks and its text). */
export type FieldConstraints = Pick<
  IJSONSchema,
  | 'description'
  | 'default'
  | 'enum'
  | 'minimum'
  | 'maximum'
  | 'exclusiveMinimum'
  | 'exclusiveMaximum'
  | 'minLength'
  | 'maxLength'
  | 'pattern'
>;

/** A schema property, resolved and ready to render. */
export interface IFieldDescriptor extends FieldConstraints {
  name: string;
  kind: FieldKind;
  title: string;
  hasDefault: boolean;
  /** Listed in the schema's `required`. */
  required: boolean;
  /** `null` is an accepted value. */
  nullable: boolean;
  /** Only shown for these job types (schema extension `job_types` / `x-job-types`). */
  jobTypes?: string[];
  /** What `pattern` asks for, in words (schema extension `x-pattern-message`); users never see the expression. */
  patternMessage?: string;
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
      patternMessage: typeof schema['x-pattern-message'] === 'string' ? schema['x-pattern-message'] : undefined,
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
          return { error: Private.sentence(field.patternMessage ?? 'This value is not in the accepted form.') };
        }
      }
      value = text;
    }
  }
  return { value };
}

namespace Private {
  /** "use letters, ..." -> "Use letters, ....". */
  export function sentence(text: string): string {
    const t = text.trim();
    return t ? t[0].toUpperCase() + t.slice(1) + (/[.!?]$/.test(t) ? '' : '.') : t;
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
}
