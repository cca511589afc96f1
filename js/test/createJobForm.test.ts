import { describe, expect, it, vi } from 'vitest';

import { CreateJobForm, ITransport, TransportError } from '../src/shared';
import { SCHEMA_BUNDLE, makeDetail, makePlan, makePreflight } from './fixtures';

function fill(form: CreateJobForm) {
  form.form.setValues({ name: 'tiny', base_model: 'sshleifer/tiny-gpt2', dataset_path: '/d.jsonl' });
}

function transport(createJob: ITransport['createJob'], planJob?: ITransport['planJob']): ITransport {
  const unused = () => Promise.reject(new Error('unused'));
  return {
    listClusters: unused,
    listJobs: unused,
    getJob: unused,
    createJob,
    cancelJob: unused,
    resumeJob: unused,
    planJob: planJob ?? unused,
    getLogs: unused,
    getEvents: unused,
    getSchema: unused
  };
}

describe('CreateJobForm pre-flight', () => {
  it('shows the plan from the cluster and puts its problems under their fields', async () => {
    const planJob = vi.fn(async () => makePreflight({
      errors: [{ field: 'dataset_path', message: 'dataset path /d.jsonl does not exist', path: null, line: null, text: null }],
      dataset: { format: 'instruction', examples: 158, validation_examples: 0, files: ['/d.jsonl'] },
      token_lengths: { mean: 40, p95: 60, max: 90, truncated: 0 },
      plan: makePlan({ memory_estimate_gb: { full: 1, lora: 0.5 }, reasons: { method: 'lora: set in training_config.json' } }),
      checkpoint_dir: '/d/checkpoints'
    }));
    const t = transport(() => Promise.reject(new Error('unused')), planJob);
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local', transport: t });
    fill(form);
    (form.node.querySelector('.jp-CleverThis-CreateJobForm-planButton') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(planJob).toHaveBeenCalled());
    await vi.waitFor(() => expect(form.node.textContent).toContain('lora: set in training_config.json'));
    expect(form.node.textContent).toContain('instruction \u00b7 158 examples');
    expect(form.node.textContent).toContain('/d/checkpoints');
    const row = form.node.querySelector('[data-field="dataset_path"]');
    expect(row?.textContent).toContain('does not exist');
  });
});

describe('CreateJobForm preview', () => {
  it('highlights the tokens that count toward the loss, and shows the warnings', async () => {
    const planJob = vi.fn(async () => makePreflight({
      errors: [],
      warnings: ['1 example(s) have no trained token left after truncation to max_seq_length 8 and are skipped: example 3'],
      preview: [
        [
          { text: '<|user|>\nhi</s>\n<|assistant|>\n', trained: false, tokens: 6 },
          { text: 'hello</s>', trained: true, tokens: 2 }
        ]
      ]
    }));
    const t = transport(() => Promise.reject(new Error('unused')), planJob);
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local', transport: t });
    fill(form);
    (form.node.querySelector('.jp-CleverThis-CreateJobForm-planButton') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(form.node.querySelector('.jp-CleverThis-preview')).not.toBeNull());
    const marks = [...form.node.querySelectorAll('.jp-CleverThis-preview mark.jp-CleverThis-trained')];
    expect(marks.map(m => m.textContent)).toEqual(['hello</s>']);
    expect(form.node.querySelector('.jp-CleverThis-untrained')?.textContent).toContain('<|assistant|>');
    expect(form.node.textContent).toContain('Example 1: 2 of 8 tokens trained');
    expect(form.node.textContent).toContain('are skipped: example 3');
  });
});

describe('CreateJobForm', () => {
  it('has Training / Fine-tuning tabs that set job_type', () => {
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local' });
    const tabs = [...form.node.querySelectorAll<HTMLButtonElement>('[role="tab"]')];
    expect(tabs.map(t => t.textContent)).toEqual(['Training', 'Fine-tuning']);
    fill(form);
    expect(form.readSpec().spec).toMatchObject({ job_type: 'train', cluster: 'local' });
    tabs[1].click();
    expect(form.jobType).toBe('finetune');
    expect(tabs[1].getAttribute('aria-selected')).toBe('true');
    expect(form.readSpec().spec).toMatchObject({ job_type: 'finetune', lora_rank: 8 });
  });

  it('moves between the tabs with the arrow keys, Home and End', () => {
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local', jobType: 'train' });
    document.body.appendChild(form.node);
    const tablist = form.node.querySelector('[role="tablist"]') as HTMLElement;
    const key = (k: string) => tablist.dispatchEvent(new KeyboardEvent('keydown', { key: k, bubbles: true }));
    key('ArrowRight');
    expect(form.jobType).toBe('finetune');
    expect(document.activeElement?.getAttribute('data-job-type')).toBe('finetune');
    key('ArrowRight'); // wraps around
    expect(form.jobType).toBe('train');
    key('End');
    expect(form.jobType).toBe('finetune');
    key('Home');
    expect(form.jobType).toBe('train');
    key('ArrowLeft');
    expect(form.jobType).toBe('finetune');
    form.node.remove();
  });

  it('never renders job_type, cluster or training_config as generated fields', () => {
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local' });
    expect(form.form.fields.map(f => f.name)).not.toContain('job_type');
    expect(form.form.fields.map(f => f.name)).not.toContain('cluster');
    expect(form.form.fields.map(f => f.name)).not.toContain('training_config');
  });

  it('sends the Advanced JSON as training_config and reports bad JSON under it', () => {
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local' });
    fill(form);
    expect(form.node.querySelector('summary')!.textContent).toBe('Advanced (training_config.json)');
    expect(form.advancedInput.placeholder).toContain('warmup_steps');
    form.config.jsonMode = true; // the "JSON" toggle
    form.advancedInput.value = '{"learning_rate": 0.001, "warmup_steps": 5}';
    expect(form.readSpec().spec!.training_config).toEqual({ learning_rate: 0.001, warmup_steps: 5 });
    form.advancedInput.value = '{not json';
    const result = form.readSpec();
    expect(result.spec).toBeNull();
    const err = form.node.querySelector('[data-field="training_config"] .jp-CleverThis-fieldError');
    expect(err!.textContent).toMatch(/Invalid JSON/);
    expect((form.node.querySelector('details') as HTMLDetailsElement).open).toBe(true);
    form.advancedInput.value = '[1, 2]';
    expect(form.readSpec().errors[0]).toMatchObject({ field: 'training_config' });
  });

  it('submits through the transport and returns the created job', async () => {
    const created = makeDetail({ name: 'tiny' });
    const createJob = vi.fn().mockResolvedValue(created);
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'gpu' });
    fill(form);
    await expect(form.submit(transport(createJob))).resolves.toBe(created);
    expect(createJob).toHaveBeenCalledWith(
      'gpu',
      expect.objectContaining({ name: 'tiny', cluster: 'gpu', job_type: 'train', epochs: 1 })
    );
  });

  it('does not call the server when the form is invalid', async () => {
    const createJob = vi.fn();
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local' });
    await expect(form.submit(transport(createJob))).resolves.toBeNull();
    expect(createJob).not.toHaveBeenCalled();
    expect(form.node.querySelector('[data-field="name"] .jp-CleverThis-fieldError')).not.toBeNull();
  });

  it('shows each 422 invalid_spec error under its field', async () => {
    const error = TransportError.fromBody(
      422,
      {
        code: 'invalid_spec',
        message: 'The job spec is invalid',
        details: {
          errors: [
            { field: 'epochs', message: 'Input should be less than or equal to 1000' },
            { field: 'training_config.warmup_steps', message: 'must be >= 0' }
          ]
        }
      },
      'failed'
    );
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local' });
    fill(form);
    await expect(form.submit(transport(vi.fn().mockRejectedValue(error)))).resolves.toBeNull();
    expect(form.node.querySelector('[data-field="epochs"] .jp-CleverThis-fieldError')!.textContent).toBe(
      'Input should be less than or equal to 1000'
    );
    expect(
      form.node.querySelector('[data-field="training_config"] [data-field="warmup_steps"] .jp-CleverThis-fieldError')!
        .textContent
    ).toContain('must be >= 0');
    expect((form.node.querySelector('details') as HTMLDetailsElement).open).toBe(true);
    // The inputs are usable again after the request.
    expect((form.form.input('epochs') as HTMLInputElement).disabled).toBe(false);
  });

  it('shows other errors at the top of the form', async () => {
    const form = new CreateJobForm({ schema: SCHEMA_BUNDLE, cluster: 'local' });
    fill(form);
    const error = TransportError.fromBody(409, { code: 'job_exists', message: 'Job tiny already exists' }, 'x');
    await form.submit(transport(vi.fn().mockRejectedValue(error)));
    expect(form.node.querySelector('.jp-CleverThis-formError')!.textContent).toContain('Job tiny already exists');
  });
});
