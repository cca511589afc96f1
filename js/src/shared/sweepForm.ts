/**
 * The Create Job form's "Sweep (Ray Tune)" section: one to three parameters, each as a list of values or a range
 * sampled on a log or linear scale, the number of trials, how many run at once, the metric and the ASHA scheduler.
 * Sent as the spec's `sweep` (the server's SweepSpec decides the trials; README, "Sweeps"). The parameter names
 * and the choices come from the schema, so the section follows the model.
 */
import { CSS_PREFIX, h } from './format';
import * as Api from './generated/api';
import { IFieldError, IJSONSchema } from './model';

const CLASS = `${CSS_PREFIX}-SweepForm`;
const ROWS = 3;

interface IRow {
  name: HTMLSelectElement;
  mode: HTMLSelectElement;
  values: HTMLInputElement;
  min: HTMLInputElement;
  max: HTMLInputElement;
  scale: HTMLSelectElement;
  node: HTMLDivElement;
}

export class SweepForm {
  /** `schema`: the JSON Schema of the job spec (its `SweepSpec` definitions name the parameters and choices). */
  constructor(schema: IJSONSchema) {
    const defs = ((schema as { $defs?: Record<string, IJSONSchema> }).$defs ?? {}) as Record<string, IJSONSchema>;
    const sweep = defs['SweepSpec'] ?? {};
    const props = ((sweep as { properties?: Record<string, IJSONSchema> }).properties ?? {}) as Record<string, IJSONSchema>;
    const names = Private.enumOf(props['parameters'], 'propertyNames') ?? [];
    this._rows = Array.from({ length: ROWS }, (_, i) => Private.row(i, names));
    this._trials = Private.input('number', 'trials', 'every combination', '1');
    this._concurrent = Private.input('number', 'concurrent', '', '1');
    this._concurrent.value = '1';
    this._metric = Private.select('metric', Private.enumOf(props['metric']) ?? ['auto', 'eval_loss', 'loss']);
    this._scheduler = Private.select('scheduler', Private.enumOf(props['scheduler']) ?? ['none', 'asha']);
    this._error = h('div', { class: `${CSS_PREFIX}-fieldError ${CLASS}-error`, role: 'alert' });
    this.node = h(
      'details',
      { class: `${CSS_PREFIX}-advanced ${CSS_PREFIX}-field ${CLASS}`, 'data-field': 'sweep' },
      h('summary', null, 'Sweep (Ray Tune)'),
      h(
        'div',
        { class: `${CSS_PREFIX}-fieldDescription` },
        'Try one to three parameters over several trials; each trial is a job of its own (NAME-t1, NAME-t2, \u2026). ' +
          'Values: a comma-separated list. Range: min and max, sampled per trial.'
      ),
      ...this._rows.map(r => r.node),
      h(
        'div',
        { class: `${CLASS}-settings` },
        h('label', null, 'Trials ', this._trials),
        h('label', null, 'Run at once ', this._concurrent),
        h('label', null, 'Best by ', this._metric),
        h('label', null, 'Early stopping ', this._scheduler)
      ),
      this._error
    );
  }

  readonly node: HTMLDetailsElement;

  /** The spec's `sweep`, or null when no parameter is chosen; errors name `sweep...`. */
  read(): { value: Api.SweepSpec | null; errors: IFieldError[] } {
    const parameters: Record<string, Api.SweepValues> = {};
    const errors: IFieldError[] = [];
    for (const row of this._rows) {
      const name = row.name.value;
      if (!name) {
        continue;
      }
      const field = `sweep.parameters.${name}`;
      if (row.mode.value === 'values') {
        const parts = row.values.value.split(',').map(s => s.trim()).filter(Boolean);
        const nums = parts.map(Number);
        if (!parts.length || nums.some(n => !Number.isFinite(n))) {
          errors.push({ field, message: `${name}: give numbers separated by commas` });
          continue;
        }
        parameters[name] = { values: nums as [number, ...number[]] };
      } else {
        const min = Number(row.min.value);
        const max = Number(row.max.value);
        if (row.min.value === '' || row.max.value === '' || !Number.isFinite(min) || !Number.isFinite(max)) {
          errors.push({ field, message: `${name}: give the range's min and max` });
          continue;
        }
        parameters[name] = { min, max, sampling: row.scale.value === 'log' ? 'log' : 'linear' };
      }
    }
    if (!Object.keys(parameters).length) {
      this._show(errors);
      return { value: null, errors };
    }
    const value: Api.SweepSpec = {
      parameters,
      concurrent: Number(this._concurrent.value) || 1,
      metric: this._metric.value as Api.SweepSpec['metric'],
      scheduler: this._scheduler.value as Api.SweepSpec['scheduler']
    };
    if (this._trials.value !== '') {
      value.trials = Number(this._trials.value);
    }
    this._show(errors);
    return { value, errors };
  }

  /** Fill the section from a spec's `sweep` (a template, a job to start from); null clears it. */
  setValue(sweep: Api.SweepSpec | null | undefined): void {
    const entries = Object.entries(sweep?.parameters ?? {});
    this._rows.forEach((row, i) => {
      const [name, v] = entries[i] ?? ['', {}];
      row.name.value = name;
      row.mode.value = v.values ? 'values' : v.min != null ? 'range' : 'values';
      row.values.value = (v.values ?? []).join(', ');
      row.min.value = v.min != null ? String(v.min) : '';
      row.max.value = v.max != null ? String(v.max) : '';
      row.scale.value = v.sampling ?? 'linear';
      Private.showMode(row);
    });
    this._trials.value = sweep?.trials != null ? String(sweep.trials) : '';
    this._concurrent.value = String(sweep?.concurrent ?? 1);
    this._metric.value = sweep?.metric ?? 'auto';
    this._scheduler.value = sweep?.scheduler ?? 'none';
    this.node.open = !!sweep;
  }

  /** Show the server's (or the section's) errors about the sweep. */
  setErrors(errors: readonly IFieldError[]): void {
    this._show(errors);
  }

  private _show(errors: readonly IFieldError[]): void {
    this._error.textContent = errors.map(e => e.message).join(' ');
    if (errors.length) {
      this.node.open = true;
    }
  }

  private readonly _rows: IRow[];
  private readonly _trials: HTMLInputElement;
  private readonly _concurrent: HTMLInputElement;
  private readonly _metric: HTMLSelectElement;
  private readonly _scheduler: HTMLSelectElement;
  private readonly _error: HTMLDivElement;
}

namespace Private {
  /** The `enum` of a schema (or of its `key` sub-schema, e.g. `propertyNames`), through anyOf/$ref-free shapes. */
  export function enumOf(schema: IJSONSchema | undefined, key?: string): string[] | null {
    const s = (key ? (schema as Record<string, unknown> | undefined)?.[key] : schema) as { enum?: unknown[] } | undefined;
    return Array.isArray(s?.enum) ? s!.enum.map(String) : null;
  }

  export function input(type: string, label: string, placeholder: string, min?: string): HTMLInputElement {
    return h('input', { type, class: `jp-mod-styled ${CLASS}-${label}`, 'aria-label': label, placeholder, min });
  }

  export function select(label: string, options: string[]): HTMLSelectElement {
    return h(
      'select',
      { class: `jp-mod-styled ${CLASS}-${label}`, 'aria-label': label },
      ...options.map(o => h('option', { value: o }, o))
    );
  }

  export function row(i: number, names: string[]): IRow {
    const name = h(
      'select',
      { class: `jp-mod-styled ${CLASS}-parameter`, 'aria-label': `Sweep parameter ${i + 1}` },
      h('option', { value: '' }, '\u2014'),
      ...names.map(n => h('option', { value: n }, n))
    );
    const mode = select(`mode ${i + 1}`, ['values', 'range']);
    const values = input('text', `values ${i + 1}`, 'e.g. 1e-4, 3e-4, 1e-3');
    const min = input('number', `min ${i + 1}`, 'min');
    const max = input('number', `max ${i + 1}`, 'max');
    const scale = select(`scale ${i + 1}`, ['linear', 'log']);
    for (const el of [values, min, max]) {
      el.step = 'any';
    }
    const node = h('div', { class: `${CLASS}-row`, 'data-row': String(i) }, name, mode, values, min, max, scale);
    const r = { name, mode, values, min, max, scale, node };
    mode.addEventListener('change', () => showMode(r));
    showMode(r);
    return r;
  }

  export function showMode(r: IRow): void {
    const range = r.mode.value === 'range';
    r.values.style.display = range ? 'none' : '';
    for (const el of [r.min, r.max, r.scale]) {
      el.style.display = range ? '' : 'none';
    }
  }
}
