/**
 * The Create Job form: "Training" / "Fine-tuning" tabs (setting `job_type`),
 * fields generated from the server's `job_spec` JSON Schema, and a
 * collapsible "Advanced (training_config.json)" section: the training_config
 * schema as grouped fields, or as JSON (`trainingConfigForm.ts`), sent as the
 * spec's `training_config` object.  Plain DOM; hosted by the JupyterLab
 * dialog and reusable elsewhere.
 */
import { CSS_PREFIX, h } from './format';
import * as Api from './generated/api';
import {
  IDataLineOpener,
  IFieldError,
  IJobDetail,
  IJobSpec,
  IJSONSchema,
  IPreflight,
  ISchemaBundle,
  ITemplate,
  JobType
} from './model';
import { dataLine } from './jobDetailSections';
import { describeFields } from './schemaFields';
import { SchemaForm } from './schemaForm';
import { SweepForm } from './sweepForm';
import { renderPlan } from './preflightView';
import { TrainingConfigForm } from './trainingConfigForm';
import { ITransport, TransportError, errorMessage } from './transport';

/** The tabs of the form. */
export const JOB_TYPE_TABS: readonly { jobType: JobType; label: string }[] = [
  { jobType: 'train', label: 'Training' },
  { jobType: 'finetune', label: 'Fine-tuning' }
];

/** Spec properties the form never renders as generated fields. */
export const RESERVED_FIELDS: readonly string[] = ['job_type', 'cluster', 'training_config', 'sweep'];

/** Options of {@link CreateJobForm}. */
export interface ICreateJobFormOptions {
  /** The answer of `GET /schema`. */
  schema: ISchemaBundle;
  /** Cluster the job is created on (sent as `cluster`). */
  cluster: string;
  /** Initially selected tab (default: the schema's `job_type` default, else `train`). */
  jobType?: JobType;
  /** Initial values of the generated fields. */
  values?: Record<string, unknown>;
  /** When given, a "Pre-flight plan" button asks the cluster what the job would do (without submitting). */
  transport?: ITransport;
  /** Saved specs offered as "Start from" (a choice fills the form; the job's name stays the user's). */
  templates?: readonly ITemplate[];
  /** "Open at line N" under a field whose error is about one line of a dataset file. */
  dataLines?: IDataLineOpener;
}

/** Result of {@link CreateJobForm.readSpec}. */
export interface ISpecResult {
  spec: IJobSpec | null;
  errors: IFieldError[];
}

const FORM_CLASS = `${CSS_PREFIX}-CreateJobForm`;

export class CreateJobForm {
  constructor(options: ICreateJobFormOptions) {
    this._cluster = options.cluster;
    this._dataLines = options.dataLines;
    this.form = new SchemaForm(options.schema.job_spec, {
      exclude: RESERVED_FIELDS,
      values: options.values
    });

    this._tabs = h('div', { class: `${CSS_PREFIX}-tabs`, role: 'tablist', 'aria-label': 'Job type' });
    for (const tab of JOB_TYPE_TABS) {
      const button = h(
        'button',
        {
          type: 'button',
          role: 'tab',
          class: `${CSS_PREFIX}-tab`,
          'data-job-type': tab.jobType
        },
        tab.label
      );
      button.addEventListener('click', () => {
        this.jobType = tab.jobType;
      });
      this._tabs.appendChild(button);
    }
    // the tabs' keyboard (WAI-ARIA tabs): arrows, Home and End move between them and select
    this._tabs.addEventListener('keydown', event => {
      const order = JOB_TYPE_TABS.map(t => t.jobType);
      const i = order.indexOf(this._jobType);
      const next =
        event.key === 'ArrowRight' || event.key === 'ArrowDown'
          ? order[(i + 1) % order.length]
          : event.key === 'ArrowLeft' || event.key === 'ArrowUp'
            ? order[(i - 1 + order.length) % order.length]
            : event.key === 'Home'
              ? order[0]
              : event.key === 'End'
                ? order[order.length - 1]
                : null;
      if (next) {
        event.preventDefault();
        this.jobType = next;
        this._tabs.querySelector<HTMLElement>(`[data-job-type="${next}"]`)?.focus();
      }
    });
    this._clusterLabel = h('div', { class: `${FORM_CLASS}-cluster` });

    const tcValues =
      options.values?.training_config !== undefined && options.values?.training_config !== null
        ? (options.values.training_config as Record<string, unknown>)
        : Private.trainingConfigDefault(options.schema);
    this.config = new TrainingConfigForm(options.schema.training_config ?? {}, { values: tcValues });
    this.config.textarea.placeholder = Private.trainingConfigPlaceholder(options.schema);
    this.config.node.addEventListener('input', () => this.config.setErrors([]));
    this._advanced = h(
      'details',
      { class: `${CSS_PREFIX}-advanced ${CSS_PREFIX}-field`, 'data-field': 'training_config' },
      h('summary', null, 'Advanced (training_config.json)'),
      h(
        'div',
        { class: `${CSS_PREFIX}-fieldDescription` },
        'Only what you set here is sent; the rest comes from the dataset\u2019s training_config.json and the automatic choices.'
      ),
      this.config.node
    );

    this.sweep = new SweepForm(options.schema.job_spec);
    this.sweep.setValue(options.values?.sweep as Api.SweepSpec | null | undefined);
    this._planOut = h('div', { class: `${FORM_CLASS}-plan`, 'aria-live': 'polite' });
    this._templates = options.templates ?? [];
    this.templateSelect = h(
      'select',
      { class: `jp-mod-styled ${FORM_CLASS}-template`, 'aria-label': 'Start from a template' },
      h('option', { value: '' }, '\u2014'),
      ...this._templates.map(t => h('option', { value: t.name }, t.name))
    );
    this.templateSelect.addEventListener('change', () => {
      const chosen = this._templates.find(t => t.name === this.templateSelect.value);
      if (chosen) {
        this.applyTemplate(chosen.spec);
      }
    });
    const templateRow = h(
      'label',
      { class: `${FORM_CLASS}-templateRow ${CSS_PREFIX}-field` },
      'Start from template ',
      this.templateSelect
    );
    if (!this._templates.length) {
      templateRow.style.display = 'none';
    }
    this.node = h(
      'div',
      { class: FORM_CLASS },
      this._tabs,
      templateRow,
      this._clusterLabel,
      this.form.node,
      this._advanced,
      this.sweep.node
    );
    const transport = options.transport;
    if (transport) {
      const planButton = h(
        'button',
        { type: 'button', class: `${CSS_PREFIX}-button ${FORM_CLASS}-planButton` },
        'Pre-flight plan'
      );
      planButton.addEventListener('click', () => void this.checkPlan(transport));
      this.node.append(h('div', { class: `${CSS_PREFIX}-toolbar` }, planButton), this._planOut);
    }
    this.cluster = options.cluster;
    this.jobType = options.jobType ?? Private.defaultJobType(options.schema);
  }

  /** The root element. */
  readonly node: HTMLDivElement;
  /** The generated form. */
  readonly form: SchemaForm;

  /** The selected tab's job type. */
  get jobType(): JobType {
    return this._jobType;
  }
  set jobType(value: JobType) {
    this._jobType = value;
    for (const tab of Array.from(this._tabs.children) as HTMLElement[]) {
      const active = tab.dataset.jobType === value;
      tab.classList.toggle('jp-mod-active', active);
      tab.setAttribute('aria-selected', String(active));
      tab.tabIndex = active ? 0 : -1;
    }
    this.node.dataset.jobType = value;
    this.form.filterJobType(value);
    this.config.jobType = value;
  }

  /** The "Start from template" choice (hidden without saved templates). */
  readonly templateSelect: HTMLSelectElement;

  /** Fill the form from a saved spec: its fields, tab and advanced options; the name typed so far stays. */
  applyTemplate(spec: Record<string, unknown>): void {
    const { name: _name, cluster: _cluster, job_type, training_config, sweep, ...fields } = spec;
    this.form.setValues(fields);
    this.sweep.setValue(sweep as Api.SweepSpec | null | undefined);
    if (job_type === 'train' || job_type === 'finetune') {
      this.jobType = job_type;
    }
    this.config.setValues(
      training_config && typeof training_config === 'object' ? (training_config as Record<string, unknown>) : {}
    );
  }

  /** The cluster the job goes to. */
  get cluster(): string {
    return this._cluster;
  }
  set cluster(value: string) {
    this._cluster = value;
    this._clusterLabel.textContent = `Cluster: ${value || '(none selected)'}`;
  }

  /** The advanced options: training_config as grouped fields, or as JSON. */
  readonly config: TrainingConfigForm;
  /** The Sweep section (the spec's `sweep`). */
  readonly sweep: SweepForm;

  /** The advanced options' JSON editor (shown with the "JSON" toggle). */
  get advancedInput(): HTMLTextAreaElement {
    return this.config.textarea;
  }

  /** Validate and build the spec; shows errors under their fields. */
  /** The current values, unchecked (the fields and what training_config sets): to fill a form again later. */
  values(): Record<string, unknown> {
    const tc = this.config.read();
    return { ...this.form.getValue().value, ...(tc.value ? { training_config: tc.value } : {}) };
  }

  readSpec(): ISpecResult {
    const { value, errors } = this.form.getValue();
    // The form's values, checked against the schema here and validated by the server (422 per field).
    const spec = { ...value, job_type: this._jobType, cluster: this._cluster } as IJobSpec;
    const tc = this.config.read();
    errors.push(...tc.errors);
    if (tc.value) {
      spec.training_config = tc.value;
    }
    const sweep = this.sweep.read();
    errors.push(...sweep.errors);
    if (sweep.value) {
      spec.sweep = sweep.value;
    }
    this.showErrors(errors);
    return { spec: errors.length ? null : spec, errors };
  }

  /** Show field errors (and an optional form-level message). */
  showErrors(errors: readonly IFieldError[], message?: string): void {
    const isConfig = (e: IFieldError) => /^(body\.|spec\.)?training_config(\.|$)/.test(e.field);
    const isSweep = (e: IFieldError) => /^(body\.|spec\.)?sweep(\.|$)/.test(e.field);
    this.sweep.setErrors(errors.filter(isSweep));
    this.form.setErrors(errors.filter(e => !isConfig(e) && !isSweep(e)), message);
    const config = errors.filter(isConfig).map(e => ({ ...e, field: e.field.replace(/^(body|spec)\./, '') }));
    this.config.setErrors(config);
    if (config.length) {
      this._advanced.open = true;
    }
    for (const e of errors) {
      const row = e.path && e.line ? this.form.node.querySelector(`[data-field="${e.field}"]`) : null;
      row?.querySelector(`:scope > .${CSS_PREFIX}-fieldError`)?.append(
        dataLine({ path: e.path!, line: e.line!, text: e.text ?? null }, this._dataLines)
      );
    }
    const first = this.node.querySelector(`.${CSS_PREFIX}-fieldError`);
    (first as HTMLElement | null)?.scrollIntoView?.({ block: 'nearest' });
  }

  /** Show an error thrown by `createJob` (422 errors go under their fields). */
  showError(err: unknown): void {
    if (err instanceof TransportError) {
      const fieldErrors = err.fieldErrors;
      if (fieldErrors.length) {
        this.showErrors(fieldErrors);
        return;
      }
    }
    this.showErrors([], errorMessage(err));
  }

  /** Disable the inputs while a request is in flight. */
  setBusy(busy: boolean): void {
    this.node.classList.toggle('jp-mod-busy', busy);
    this.node
      .querySelectorAll('input, select, textarea, button')
      .forEach(el => ((el as HTMLInputElement).disabled = busy));
  }

  /**
   * Validate, then create the job through the transport.  Resolves to the
   * created job, or null when validation or the request failed (the errors
   * are then shown in the form).
   */
  async submit(transport: ITransport): Promise<IJobDetail | null> {
    const { spec } = this.readSpec();
    if (!spec) {
      return null;
    }
    this.setBusy(true);
    try {
      return await transport.createJob(this._cluster, spec);
    } catch (err) {
      this.showError(err);
      return null;
    } finally {
      this.setBusy(false);
    }
  }

  /** Ask the cluster for the pre-flight plan of the current spec and show it under the form. */
  async checkPlan(transport: ITransport): Promise<IPreflight | null> {
    const { spec } = this.readSpec();
    if (!spec) {
      return null;
    }
    this._planOut.replaceChildren(h('div', null, 'Checking on the cluster\u2026'));
    try {
      const plan = await transport.planJob(this._cluster, spec);
      this._planOut.replaceChildren(renderPlan(plan));
      const errors = plan.errors ?? [];
      if (errors.length) {
        this.showErrors(errors);
      }
      return plan;
    } catch (err) {
      this._planOut.replaceChildren(h('div', { class: `${CSS_PREFIX}-formError` }, errorMessage(err)));
      return null;
    }
  }

  private readonly _planOut: HTMLDivElement;
  private readonly _templates: readonly ITemplate[];
  private _jobType: JobType = 'train';
  private _cluster: string;
  private readonly _dataLines?: IDataLineOpener;
  private readonly _tabs: HTMLDivElement;
  private readonly _clusterLabel: HTMLDivElement;
  private readonly _advanced: HTMLDetailsElement;
}

namespace Private {
  /** The `job_type` default of the schema when it names one of the tabs. */
  export function defaultJobType(bundle: ISchemaBundle): JobType {
    const value = (bundle.job_spec?.properties?.['job_type'] as IJSONSchema | undefined)?.default;
    return JOB_TYPE_TABS.find(t => t.jobType === value)?.jobType ?? 'train';
  }

  /** The default of the spec's `training_config` property, if it is a non-empty object. */
  export function trainingConfigDefault(bundle: ISchemaBundle): Record<string, unknown> | null {
    const props = bundle.job_spec?.properties ?? {};
    const value = (props['training_config'] as IJSONSchema | undefined)?.default;
    return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.keys(value).length
      ? (value as Record<string, unknown>)
      : null;
  }

  /** A placeholder listing the keys (and defaults) of the training_config schema. */
  export function trainingConfigPlaceholder(bundle: ISchemaBundle): string {
    const schema = bundle.training_config;
    if (!schema || typeof schema !== 'object') {
      return '{\n  "learning_rate": 2e-5\n}';
    }
    const example: Record<string, unknown> = {};
    for (const field of describeFields(schema)) {
      if (field.hasDefault) {
        example[field.name] = field.default;
      }
    }
    return Object.keys(example).length ? JSON.stringify(example, null, 2) : '{}';
  }
}
