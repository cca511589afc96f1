import { describe, expect, it } from 'vitest';

import { CreateJobForm, ISchemaBundle, TrainingConfigForm, fieldApplies } from '../src/shared';
import snapshot from '../src/shared/generated/schema-bundle.json';

/** The real schemas (pydantic's export, as GET /schema serves them). */
const bundle = snapshot as unknown as ISchemaBundle;

function set(form: TrainingConfigForm, name: string, value: string): void {
  const input = form.form.input(name)!;
  if (input instanceof HTMLSelectElement) {
    const option = [...input.options].find(o => o.textContent === value)!;
    input.value = option.value;
  } else {
    input.value = value;
  }
  input.dispatchEvent(new Event(input instanceof HTMLSelectElement ? 'change' : 'input', { bubbles: true }));
}

function shown(form: TrainingConfigForm, name: string): boolean {
  return form.form.row(name)!.dataset.hidden !== 'true';
}

describe('TrainingConfigForm', () => {
  it('groups the real training_config schema, with choices as selects and nothing unnamed left out', () => {
    const form = new TrainingConfigForm(bundle.training_config!);
    const groups = [...form.node.querySelectorAll('fieldset')].map(f => f.querySelector('legend')!.textContent);
    expect(groups).toEqual([
      'Method',
      'LoRA',
      'Precision, strategy, DeepSpeed and model parallelism',
      'Optimisation',
      'Data and validation',
      'Checkpoints',
      'Tracking and runtime'
    ]);
    for (const name of ['method', 'mixed_precision', 'strategy', 'lr_scheduler', 'placement_strategy', 'optim',
      'attn_implementation']) {
      expect(form.form.input(name)).toBeInstanceOf(HTMLSelectElement);
    }
    expect([...(form.form.input('method') as HTMLSelectElement).options].map(o => o.textContent)).toEqual([
      '\u2014',
      'full',
      'lora',
      'qlora'
    ]);
    const inGroups = [...form.node.querySelectorAll('fieldset [data-field]')].map(r => (r as HTMLElement).dataset.field);
    expect(inGroups.sort()).toEqual(form.form.fields.map(f => f.name).sort()); // every field is in a group
  });

  it('shows a field only where it applies: LoRA for lora and qlora, quantization for qlora', () => {
    const form = new TrainingConfigForm(bundle.training_config!, { jobType: 'finetune' });
    expect(shown(form, 'lora_r')).toBe(true); // automatic picks LoRA for a fine-tune
    expect(shown(form, 'quantization')).toBe(false);
    set(form, 'method', 'full');
    expect(shown(form, 'lora_r')).toBe(false);
    expect((form.node.querySelector('fieldset[data-group="lora"]') as HTMLElement).style.display).toBe('none');
    set(form, 'method', 'qlora');
    expect(shown(form, 'lora_r')).toBe(true);
    expect(shown(form, 'quantization')).toBe(true);
    form.jobType = 'train';
    set(form, 'method', '\u2014');
    expect(shown(form, 'lora_r')).toBe(false); // training from scratch: no LoRA
    expect(fieldApplies('learning_rate', 'full', 'train')).toBe(true);
  });

  it('sends only what was set: the keys it started with and the fields the user changed', () => {
    const form = new TrainingConfigForm(bundle.training_config!, { values: { learning_rate: 0.001 } });
    expect(form.read().value).toEqual({ learning_rate: 0.001 });
    set(form, 'method', 'qlora');
    set(form, 'quantization', '4bit');
    set(form, 'lora_r', '8');
    expect(form.read().value).toEqual({ learning_rate: 0.001, method: 'qlora', quantization: '4bit', lora_r: 8 });
    set(form, 'method', 'lora'); // quantization no longer applies: not sent
    expect(form.read().value).toEqual({ learning_rate: 0.001, method: 'lora', lora_r: 8 });
    expect(new TrainingConfigForm(bundle.training_config!).read().value).toBeUndefined();
  });

  it('says which field is wrong, and the JSON toggle carries the same keys both ways', () => {
    const form = new TrainingConfigForm(bundle.training_config!);
    set(form, 'lora_r', '2.5'); // not a whole number
    expect(form.read().errors).toEqual([{ field: 'training_config.lora_r', message: expect.any(String) }]);
    set(form, 'lora_r', '32');
    form.jsonMode = true;
    expect(JSON.parse(form.textarea.value)).toEqual({ lora_r: 32 });
    form.textarea.value = '{"lora_r": 4, "seed": 7}';
    form.jsonMode = false;
    expect((form.form.input('seed') as HTMLInputElement).value).toBe('7');
    expect(form.read().value).toEqual({ lora_r: 4, seed: 7 });
    form.jsonMode = true;
    form.textarea.value = '{oops';
    form.jsonMode = false; // refused: stays in JSON, with the reason
    expect(form.jsonMode).toBe(true);
    expect(form.node.textContent).toContain('Invalid JSON');
  });

  it('is the Create Job form\'s Advanced section, prefilled from a cloned spec', () => {
    const form = new CreateJobForm({
      schema: bundle,
      cluster: 'local',
      values: { name: 'copy-2', training_config: { method: 'lora', lora_r: 8 } }
    });
    expect((form.config.form.input('lora_r') as HTMLInputElement).value).toBe('8');
    const spec = form.readSpec().spec!;
    expect(spec.training_config).toEqual({ method: 'lora', lora_r: 8 });
  });

  it('offers saved templates; a choice fills the fields, the tab and the advanced options, not the name', () => {
    const form = new CreateJobForm({
      schema: bundle,
      cluster: 'local',
      jobType: 'train',
      templates: [
        { name: 'qlora-small', spec: { base_model: '/m/tiny', epochs: 4, job_type: 'finetune', training_config: { method: 'qlora', quantization: '4bit' } } }
      ]
    });
    expect([...form.templateSelect.options].map(o => o.textContent)).toEqual(['\u2014', 'qlora-small']);
    (form.form.input('name') as HTMLInputElement).value = 'my-run';
    form.templateSelect.value = 'qlora-small';
    form.templateSelect.dispatchEvent(new Event('change'));
    expect(form.jobType).toBe('finetune');
    expect((form.form.input('base_model') as HTMLInputElement).value).toBe('/m/tiny');
    expect((form.form.input('name') as HTMLInputElement).value).toBe('my-run');
    const spec = form.readSpec().spec!;
    expect(spec).toMatchObject({ name: 'my-run', epochs: 4, job_type: 'finetune' });
    expect(spec.training_config).toEqual({ method: 'qlora', quantization: '4bit' });
    const none = new CreateJobForm({ schema: bundle, cluster: 'local' });
    expect((none.templateSelect.parentElement as HTMLElement).style.display).toBe('none');
  });
});
