/**
 * The notebook widget's "create" view: the Create Job form built from the
 * `schema` traitlet, with its Create button.
 */
import { ModelTransport } from './modelTransport';
import { CSS_PREFIX, CreateJobForm, IJobDetail, ISchemaBundle, h } from './shared';

export class WidgetCreatePane {
  /** `onCreated`: the kernel confirmed the new job. */
  constructor(
    private readonly _transport: ModelTransport,
    private readonly _onCreated: (job: IJobDetail) => void
  ) {
    this._button = h(
      'button',
      { type: 'button', class: `${CSS_PREFIX}-button jp-mod-accept ${CSS_PREFIX}-createSubmit` },
      'Create'
    );
    this._button.addEventListener('click', this._onClick);
  }

  /** The root element. */
  readonly node = h('div', { class: `${CSS_PREFIX}-widgetCreate` });

  /** Rebuild the form from the `schema` traitlet (a message when it has none). */
  onSchema(): void {
    const schema = this._transport.model.get('schema');
    if (!schema || typeof schema !== 'object' || !(schema as ISchemaBundle).job_spec) {
      this._form = null;
      this.node.replaceChildren(
        h('div', { class: `${CSS_PREFIX}-LossCurve-empty` }, 'The job schema is not available.')
      );
      return;
    }
    const transport = this._transport;
    // `values`: the fields the form opens with (a sweep's "Create from best": the best trial's spec)
    const values = this._transport.model.get('values');
    this._form = new CreateJobForm({
      schema: schema as ISchemaBundle,
      cluster: transport.cluster(),
      transport,
      values: values && typeof values === 'object' ? (values as Record<string, unknown>) : undefined
    });
    this.node.replaceChildren(
      this._form.node,
      h('div', { class: `${CSS_PREFIX}-toolbar ${CSS_PREFIX}-widgetCreateFooter` }, this._button)
    );
  }

  /** Follow the `cluster` traitlet. */
  onCluster(): void {
    if (this._form) {
      this._form.cluster = this._transport.cluster();
    }
  }

  private _onClick = async (): Promise<void> => {
    if (!this._form) {
      return;
    }
    this._button.disabled = true;
    try {
      const created = await this._form.submit(this._transport);
      if (created) {
        this._onCreated(created);
      }
    } finally {
      this._button.disabled = false;
    }
  };

  private _form: CreateJobForm | null = null;
  private readonly _button: HTMLButtonElement;
}
