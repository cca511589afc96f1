/**
 * The Create Job form's advanced options: the training_config JSON Schema as grouped fields with choices
 * (method, LoRA, precision and strategy, optimisation, data; whatever the schema adds lands under "Other"), each
 * shown only where it applies, and a "JSON" toggle to edit the same object as text.
 *
 * Only what the user set is sent: the keys given at the start (a cloned job's) and the fields the user changed.
 * Every other key is left to the dataset's training_config.json and the automatic choices, as the runtime
 * merges them (README, "training_config.json").
 */
import { CSS_PREFIX, h } from './format';
import { IFieldError, IJSONSchema } from './model';
import { SchemaForm } from './schemaForm';

/** A group of training_config fields, in the order the form shows them. */
export interface IConfigGroup {
  id: string;
  title: string;
  fields: readonly string[];
}

export const CONFIG_GROUPS: readonly IConfigGroup[] = [
  { id: 'method', title: 'Method', fields: ['method', 'quantization', 'chat_template'] },
  { id: 'lora', title: 'LoRA', fields: ['lora_r', 'lora_alpha', 'lora_dropout', 'target_modules'] },
  {
    id: 'strategy',
    title: 'Precision, strategy, DeepSpeed and model parallelism',
    fields: [
      'mixed_precision',
      'strategy',
      'deepspeed',
      'gradient_checkpointing',
      'attn_implementation',
      'use_liger_kernel',
      'placement_strategy',
      'tensor_parallel_size',
      'pipeline_parallel_size',
      'pipeline_schedule',
      'pipeline_microbatches'
    ]
  },
  {
    id: 'optimisation',
    title: 'Optimisation',
    fields: [
      'learning_rate',
      'optim',
      'lr_scheduler',
      'warmup_ratio',
      'weight_decay',
      'max_grad_norm',
      'gradient_accumulation_steps',
      'seed'
    ]
  },
  {
    id: 'data',
    title: 'Data and validation',
    fields: [
      'max_seq_length',
      'packing',
      'group_by_length',
      'validation_split',
      'eval_steps',
      'early_stopping_patience',
      'early_stopping_threshold'
    ]
  },
  { id: 'checkpoints', title: 'Checkpoints', fields: ['keep_checkpoints'] }
];

/** Fields of the LoRA group. */
const LORA_FIELDS = new Set(CONFIG_GROUPS.find(g => g.id === 'lora')!.fields);

/**
 * Whether a field applies to a method: the LoRA fields to lora and qlora (and to an automatic method on a
 * fine-tune, which picks LoRA where a full fine-tune does not fit), quantization to qlora only.
 */
export function fieldApplies(name: string, method: string | null | undefined, jobType: string): boolean {
  if (name === 'quantization') {
    return method === 'qlora';
  }
  if (LORA_FIELDS.has(name)) {
    return method === 'lora' || method === 'qlora' || (!method && jobType === 'finetune');
  }
  return true;
}

/** Options of {@link TrainingConfigForm}. */
export interface ITrainingConfigFormOptions {
  /** Keys set from the start (sent even when left as they are). */
  values?: Record<string, unknown> | null;
  jobType?: string;
}

export class TrainingConfigForm {
  constructor(schema: IJSONSchema, options: ITrainingConfigFormOptions = {}) {
    const values = options.values ?? {};
    this.form = new SchemaForm(schema, { values, idPrefix: `${CSS_PREFIX}-tc` });
    this._set = new Set(Object.keys(values));
    this._jobType = options.jobType ?? 'finetune';
    this.textarea = h('textarea', {
      class: `jp-mod-styled ${CSS_PREFIX}-json ${CSS_PREFIX}-configJson`,
      name: 'training_config',
      rows: 10,
      spellcheck: 'false',
      'aria-label': 'training_config.json'
    });
    this.textarea.style.display = 'none';
    this._toggle = h('input', { type: 'checkbox', class: `${CSS_PREFIX}-jsonToggle` });
    this._toggle.addEventListener('change', () => {
      this.jsonMode = this._toggle.checked;
    });
    this._fields = h('div', { class: `${CSS_PREFIX}-configGroups` }, this.form.node, ...this._group());
    this._error = h('div', { class: `${CSS_PREFIX}-fieldError`, role: 'alert' });
    this._error.style.display = 'none';
    this.node = h(
      'div',
      { class: `${CSS_PREFIX}-TrainingConfigForm` },
      h(
        'label',
        { class: `${CSS_PREFIX}-jsonToggleLabel`, title: 'Edit training_config as a JSON object' },
        this._toggle,
        'JSON'
      ),
      this._error,
      this._fields,
      this.textarea
    );
    this._fields.addEventListener('input', this._onEdit);
    this._fields.addEventListener('change', this._onEdit);
    this._applyVisibility();
  }

  /** The generated fields (rows moved into the groups). */
  readonly form: SchemaForm;
  /** The JSON editor of the toggle. */
  readonly textarea: HTMLTextAreaElement;
  /** The root element. */
  readonly node: HTMLDivElement;

  /** Replace what is set with `values` (a template's training_config); every other field back to unset. */
  setValues(values: Record<string, unknown>): void {
    const defaults = Object.fromEntries(this.form.fields.map(f => [f.name, f.hasDefault ? f.default : null]));
    this.form.setValues({ ...defaults, ...values });
    this._set = new Set(Object.keys(values));
    this.textarea.value = Object.keys(values).length ? JSON.stringify(values, null, 2) : '';
    this._applyVisibility();
  }

  /** The job type (the LoRA fields apply to an automatic method on a fine-tune). */
  set jobType(value: string) {
    this._jobType = value;
    this._applyVisibility();
  }

  /** Editing as JSON text instead of fields; switching carries the set keys across. */
  get jsonMode(): boolean {
    return this._json;
  }
  set jsonMode(on: boolean) {
    if (on === this._json) {
      return;
    }
    if (on) {
      const { value } = this._readFields();
      this.textarea.value = Object.keys(value).length ? JSON.stringify(value, null, 2) : '';
    } else {
      const parsed = Private.parse(this.textarea.value);
      if (parsed.error) {
        this._toggle.checked = true;
        this.setErrors([{ field: 'training_config', message: parsed.error }]);
        return;
      }
      this.form.setValues(parsed.value);
      this._set = new Set(Object.keys(parsed.value));
      this._applyVisibility();
    }
    this._json = on;
    this._toggle.checked = on;
    this._fields.style.display = on ? 'none' : '';
    this.textarea.style.display = on ? '' : 'none';
  }

  /** The training_config to send (undefined when nothing is set), or the errors that stop it. */
  read(): { value: Record<string, unknown> | undefined; errors: IFieldError[] } {
    if (this._json) {
      const parsed = Private.parse(this.textarea.value);
      if (parsed.error) {
        return { value: undefined, errors: [{ field: 'training_config', message: parsed.error }] };
      }
      return { value: Object.keys(parsed.value).length ? parsed.value : undefined, errors: [] };
    }
    const { value, errors } = this._readFields();
    return {
      value: Object.keys(value).length ? value : undefined,
      errors: errors.map(e => ({ ...e, field: `training_config.${e.field}` }))
    };
  }

  /** Show errors (`training_config.<key>` under the key's field; the rest at the top of the fields). */
  setErrors(errors: readonly IFieldError[]): void {
    const own = errors.map(e => ({ ...e, field: e.field.replace(/^training_config\.?/, '') }));
    const matched = this._json ? [] : own.filter(e => this.form.matchField(e.field));
    this.form.setErrors(matched);
    // the rest (bad JSON, a key no field shows) above the fields or the JSON, where the user looks
    const rest = own.filter(e => !matched.includes(e)).map(e => (e.field ? `${e.field}: ${e.message}` : e.message));
    this._error.textContent = rest.join('\n');
    this._error.style.display = rest.length ? '' : 'none';
  }

  private _readFields(): { value: Record<string, unknown>; errors: IFieldError[] } {
    const { value, errors } = this.form.getValue();
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value)) {
      if (this._set.has(key) && v !== null && v !== undefined) {
        out[key] = v;
      }
    }
    return { value: out, errors: errors.filter(e => this._set.has(e.field)) };
  }

  /** Move the generated rows into their groups; fields no group names go under "Other". */
  private _group(): HTMLElement[] {
    const named = new Set(CONFIG_GROUPS.flatMap(g => g.fields));
    const other = this.form.fields.map(f => f.name).filter(n => !named.has(n));
    const groups = [...CONFIG_GROUPS, { id: 'other', title: 'Tracking and runtime', fields: other }];
    return groups
      .map(group => {
        const rows = group.fields.map(n => this.form.row(n)).filter((r): r is HTMLElement => !!r);
        return rows.length
          ? h(
              'fieldset',
              { class: `${CSS_PREFIX}-configGroup`, 'data-group': group.id },
              h('legend', null, group.title),
              ...rows
            )
          : null;
      })
      .filter((g): g is HTMLFieldSetElement => !!g);
  }

  private _applyVisibility(): void {
    const method = this.form.getValue().value['method'] as string | undefined;
    for (const field of this.form.fields) {
      const row = this.form.row(field.name);
      if (row) {
        const visible = fieldApplies(field.name, method, this._jobType);
        row.style.display = visible ? '' : 'none';
        row.dataset.hidden = visible ? '' : 'true';
      }
    }
    for (const group of Array.from(this._fields?.querySelectorAll<HTMLElement>(`.${CSS_PREFIX}-configGroup`) ?? [])) {
      const shown = Array.from(group.querySelectorAll<HTMLElement>('[data-field]')).some(r => r.dataset.hidden !== 'true');
      group.style.display = shown ? '' : 'none';
    }
  }

  private _onEdit = (event: Event): void => {
    const row = (event.target as HTMLElement | null)?.closest<HTMLElement>('[data-field]');
    if (row?.dataset.field) {
      this._set.add(row.dataset.field);
    }
    this._applyVisibility();
  };

  private _set: Set<string>;
  private _jobType: string;
  private _json = false;
  private readonly _toggle: HTMLInputElement;
  private readonly _fields: HTMLDivElement;
  private readonly _error: HTMLDivElement;
}

namespace Private {
  export function parse(text: string): { value: Record<string, unknown>; error?: string } {
    const t = text.trim();
    if (!t) {
      return { value: {} };
    }
    try {
      const parsed: unknown = JSON.parse(t);
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
        return { value: {}, error: 'Enter a JSON object ({...}).' };
      }
      return { value: parsed as Record<string, unknown> };
    } catch (err) {
      return { value: {}, error: `Invalid JSON: ${err instanceof Error ? err.message : String(err)}` };
    }
  }
}
