/** The Create Job form's Sweep section, on the server's real schema (its parameter names and choices). */
import { describe, expect, it } from 'vitest';

import { CreateJobForm, ISchemaBundle } from '../src/shared';
import snapshot from '../src/shared/generated/schema-bundle.json';

const bundle = snapshot as unknown as ISchemaBundle;

function choose(form: CreateJobForm, row: number, name: string, mode: 'values' | 'range'): HTMLElement {
  const node = form.sweep.node.querySelector<HTMLElement>(`[data-row="${row}"]`)!;
  const select = node.querySelector<HTMLSelectElement>('select')!;
  select.value = name;
  const modeSelect = node.querySelectorAll<HTMLSelectElement>('select')[1];
  modeSelect.value = mode;
  modeSelect.dispatchEvent(new Event('change'));
  return node;
}

describe('Sweep section', () => {
  it('offers the parameters the model allows and sends nothing until one is chosen', () => {
    const form = new CreateJobForm({ schema: bundle, cluster: 'local' });
    const options = [...form.sweep.node.querySelectorAll<HTMLOptionElement>('[data-row="0"] select:first-child option')];
    expect(options.map(o => o.value)).toEqual(
      ['', 'learning_rate', 'lora_r', 'lora_alpha', 'batch_size', 'epochs', 'warmup_ratio', 'weight_decay']);
    form.form.setValues({ name: 'sw', base_model: 'm', dataset_path: '/d' });
    expect(form.readSpec().spec!.sweep).toBeUndefined();
  });

  it('builds the spec from values and ranges, and names a bad entry', () => {
    const form = new CreateJobForm({ schema: bundle, cluster: 'local' });
    form.form.setValues({ name: 'sw', base_model: 'm', dataset_path: '/d' });
    choose(form, 0, 'learning_rate', 'values').querySelector<HTMLInputElement>('input[type="text"]')!.value = '1e-4, 3e-4';
    const r = choose(form, 1, 'lora_r', 'range');
    const [min, max] = r.querySelectorAll<HTMLInputElement>('input[type="number"]');
    min.value = '8';
    max.value = '32';
    r.querySelectorAll<HTMLSelectElement>('select')[2].value = 'log';
    form.sweep.node.querySelector<HTMLInputElement>('input[aria-label="trials"]')!.value = '4';
    form.sweep.node.querySelector<HTMLSelectElement>('select[aria-label="scheduler"]')!.value = 'asha';
    expect(form.readSpec().spec!.sweep).toEqual({
      parameters: { learning_rate: { values: [1e-4, 3e-4] }, lora_r: { min: 8, max: 32, sampling: 'log' } },
      trials: 4, concurrent: 1, metric: 'auto', scheduler: 'asha'
    });
    min.value = '';
    const bad = form.readSpec();
    expect(bad.spec).toBeNull();
    expect(bad.errors).toEqual([{ field: 'sweep.parameters.lora_r', message: "lora_r: give the range's min and max" }]);
    expect(form.sweep.node.open).toBe(true);
    expect(form.sweep.node.querySelector('[role="alert"]')!.textContent).toBe("lora_r: give the range's min and max");
  });

  it('opens filled from a spec with a sweep (a template, a job to start from)', () => {
    const form = new CreateJobForm({
      schema: bundle,
      cluster: 'local',
      values: { sweep: { parameters: { epochs: { values: [1, 2] } }, concurrent: 2, metric: 'loss', scheduler: 'none' } }
    });
    expect(form.sweep.node.open).toBe(true);
    expect(form.sweep.read().value).toEqual({ parameters: { epochs: { values: [1, 2] } }, concurrent: 2, metric: 'loss',
      scheduler: 'none' });
  });
});
