/**
 * The form on the server's real `GET /schema` answer (`JobSpec` / `TrainingConfig`
 * JSON Schemas from pydantic): src/shared/generated/schema-bundle.json, written by
 * `python -m jupyter_cleverthis.schemas js/src/shared/generated` and kept equal to
 * what the models export by tests/unit/test_generated_types.py.
 */
import { describe, expect, it } from 'vitest';

import { CreateJobForm, ISchemaBundle, RESERVED_FIELDS } from '../src/shared';
import snapshot from '../src/shared/generated/schema-bundle.json';

const bundle = snapshot as unknown as ISchemaBundle;

describe('Create Job form on the real schema', () => {
  it('renders every spec property except the reserved ones, in order', () => {
    const form = new CreateJobForm({ schema: bundle, cluster: 'local' });
    const expected = Object.keys(bundle.job_spec.properties!).filter(n => !RESERVED_FIELDS.includes(n));
    const rendered = [...form.form.node.querySelectorAll<HTMLElement>('[data-field]')].map(r => r.dataset.field);
    expect(rendered).toEqual(expected);
    expect(expected).toContain('epochs');
  });

  it('uses titles, defaults, enums and bounds from the schema', () => {
    const form = new CreateJobForm({ schema: bundle, cluster: 'local' });
    const props = bundle.job_spec.properties!;
    for (const [name, prop] of Object.entries(props)) {
      if (RESERVED_FIELDS.includes(name)) {
        continue;
      }
      const row = form.form.row(name)!;
      expect(row.querySelector('label')!.textContent).toContain(String(prop.title ?? ''));
      if (typeof prop.description === 'string') {
        expect(row.textContent).toContain(prop.description);
      }
      const input = form.form.input(name)!;
      if (prop.type === 'integer' && typeof prop.default === 'number') {
        expect(input.value).toBe(String(prop.default));
        if (typeof prop.minimum === 'number') {
          expect(input.getAttribute('min')).toBe(String(prop.minimum));
        }
      }
      if (Array.isArray(prop.enum)) {
        const options = [...(input as HTMLSelectElement).options].map(o => o.textContent);
        expect(options).toEqual(expect.arrayContaining(prop.enum.map(String)));
      }
    }
  });

  it('starts on the schema default tab and builds a valid spec', () => {
    const form = new CreateJobForm({ schema: bundle, cluster: 'local' });
    const defaultType = bundle.job_spec.properties!.job_type.default;
    expect(form.jobType).toBe(defaultType);
    form.form.setValues({ name: 'llama2-customer-support-v1' });
    const { spec, errors } = form.readSpec();
    expect(errors).toEqual([]);
    expect(spec).toMatchObject({ name: 'llama2-customer-support-v1', cluster: 'local', job_type: defaultType });
    expect(spec).not.toHaveProperty('output_dir');
    expect(form.advancedInput.placeholder).toContain('learning_rate');
  });

  it('validates the name pattern and exclusive minimums', () => {
    const form = new CreateJobForm({ schema: bundle, cluster: 'local' });
    form.form.setValues({ name: '-bad name', cpus_per_worker: 0 });
    const { errors } = form.readSpec();
    expect(errors.map(e => e.field).sort()).toEqual(['cpus_per_worker', 'name']);
    expect(form.node.querySelector('[data-field="name"] .jp-CleverThis-fieldError')).not.toBeNull();
  });
});
