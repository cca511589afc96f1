import { describe, expect, it } from 'vitest';

import { SchemaForm, describeFields, parseFieldValue, resolveSchema } from '../src/shared';
import { JOB_SPEC_SCHEMA } from './fixtures';

const EXCLUDE = ['job_type', 'cluster', 'training_config'];

describe('resolveSchema', () => {
  it('resolves $ref with sibling keywords winning', () => {
    const { schema, nullable } = resolveSchema(JOB_SPEC_SCHEMA, JOB_SPEC_SCHEMA.properties!.framework);
    expect(schema.enum).toEqual(['pytorch', 'huggingface']);
    expect(schema.default).toBe('pytorch');
    expect(nullable).toBe(false);
  });

  it('unwraps Optional (anyOf with null) and allOf', () => {
    const opt = resolveSchema(JOB_SPEC_SCHEMA, JOB_SPEC_SCHEMA.properties!.learning_rate);
    expect(opt.schema.type).toBe('number');
    expect(opt.nullable).toBe(true);
    const allOf = resolveSchema(JOB_SPEC_SCHEMA, {
      allOf: [{ $ref: '#/$defs/Framework' }],
      default: 'huggingface',
      description: 'which trainer'
    });
    expect(allOf.schema.enum).toEqual(['pytorch', 'huggingface']);
    expect(allOf.schema.default).toBe('huggingface');
    expect(allOf.schema.description).toBe('which trainer');
  });
});

describe('describeFields', () => {
  it('follows the schema: order, titles, required, bounds; skips excluded names', () => {
    const fields = describeFields(JOB_SPEC_SCHEMA, { exclude: EXCLUDE });
    expect(fields.map(f => f.name)).toEqual([
      'name',
      'base_model',
      'dataset_path',
      'framework',
      'epochs',
      'batch_size',
      'workers',
      'learning_rate',
      'lora_rank',
      'bf16'
    ]);
    const byName = Object.fromEntries(fields.map(f => [f.name, f]));
    expect(byName.name).toMatchObject({ kind: 'string', title: 'Job name', required: true });
    expect(byName.name.pattern).toBe('^[a-z0-9][a-z0-9-]{0,62}$');
    expect(byName.epochs).toMatchObject({ kind: 'integer', minimum: 1, maximum: 1000, default: 1, required: false });
    expect(byName.batch_size).toMatchObject({ exclusiveMinimum: 0 });
    expect(byName.framework).toMatchObject({ kind: 'enum', enum: ['pytorch', 'huggingface'] });
    expect(byName.learning_rate).toMatchObject({ kind: 'number', nullable: true });
    expect(byName.bf16.kind).toBe('boolean');
    expect(byName.lora_rank.jobTypes).toEqual(['finetune']);
  });

  it('titles fields without a title from their name', () => {
    const [field] = describeFields({ type: 'object', properties: { max_seq_len: { type: 'integer' } } });
    expect(field.title).toBe('Max seq len');
  });
});

describe('parseFieldValue', () => {
  const fields = Object.fromEntries(
    describeFields(JOB_SPEC_SCHEMA, { exclude: EXCLUDE }).map(f => [f.name, f])
  );

  it('parses and range-checks numbers', () => {
    expect(parseFieldValue(fields.epochs, '3')).toEqual({ value: 3 });
    expect(parseFieldValue(fields.epochs, '0').error).toMatch(/at least 1/);
    expect(parseFieldValue(fields.epochs, '1001').error).toMatch(/at most 1000/);
    expect(parseFieldValue(fields.epochs, '1.5').error).toMatch(/whole number/);
    expect(parseFieldValue(fields.epochs, 'abc').error).toMatch(/number/);
    expect(parseFieldValue(fields.batch_size, '0').error).toMatch(/greater than 0/);
    expect(parseFieldValue(fields.learning_rate, '0.0001')).toEqual({ value: 0.0001 });
  });

  it('omits empty optional fields and rejects empty required ones', () => {
    expect(parseFieldValue(fields.learning_rate, '')).toEqual({});
    expect(parseFieldValue(fields.name, '').error).toMatch(/required/);
  });

  it('checks patterns and says what they ask for in words, never the expression', () => {
    expect(parseFieldValue(fields.name, 'my-job')).toEqual({ value: 'my-job' });
    expect(parseFieldValue(fields.name, 'Bad Name!').error).toBe(
      'Use lowercase letters, digits or -, starting with a letter or digit.'
    );
    const bare = describeFields({ properties: { tag: { type: 'string', pattern: '^[a-z]+$' } } })[0];
    const error = parseFieldValue(bare, 'A1').error!;
    expect(error).not.toContain('[a-z]');
    expect(error).toMatch(/not in the accepted form/);
  });
});

describe('SchemaForm', () => {
  it('sets the pattern attribute only when the browser can compile it', () => {
    const f = new SchemaForm({
      type: 'object',
      properties: { ok: { type: 'string', pattern: '^[a-z]+$' }, dash: { type: 'string', pattern: '^[a-z._-]+$' } }
    });
    expect(f.input('ok')!.getAttribute('pattern')).toBe('^[a-z]+$');
    expect(f.input('dash')!.hasAttribute('pattern')).toBe(false);
    (f.input('dash') as HTMLInputElement).value = 'a/b';
    expect(f.getValue().errors).toEqual([{ field: 'dash', message: 'This value is not in the accepted form.' }]);
  });

  function form() {
    const f = new SchemaForm(JOB_SPEC_SCHEMA, { exclude: EXCLUDE });
    document.body.appendChild(f.node);
    return f;
  }

  it('renders one row per property with data-field and the schema attributes', () => {
    const f = form();
    const rows = [...f.node.querySelectorAll<HTMLElement>('[data-field]')].map(r => r.dataset.field);
    expect(rows).toEqual(f.fields.map(x => x.name));
    expect(f.node.querySelector('[data-field="job_type"]')).toBeNull();
    expect(f.node.querySelector('[data-field="cluster"]')).toBeNull();

    const epochs = f.input('epochs') as HTMLInputElement;
    expect(epochs.type).toBe('number');
    expect(epochs.min).toBe('1');
    expect(epochs.max).toBe('1000');
    expect(epochs.value).toBe('1');
    expect((f.input('batch_size') as HTMLInputElement).min).toBe('1');
    // `[a-z0-9-]` is valid with the `u` flag but not with `v`, which browsers use for the `pattern`
    // attribute (Chromium ignores it with a console error): left off, still checked by parseFieldValue.
    expect(f.input('name')!.hasAttribute('pattern')).toBe(false);
    expect(f.row('name')!.querySelector('label')!.textContent).toContain('Job name');
    expect(f.row('name')!.textContent).toContain('Unique job name');
    // Description and generated hints read as sentences.
    expect(f.row('epochs')!.querySelector('.jp-CleverThis-fieldDescription')!.textContent).toBe(
      'Range [1, 1000]. Default: 1.'
    );
    expect(f.row('base_model')!.querySelector('.jp-CleverThis-fieldDescription')!.textContent).toBe(
      'Hugging Face model id or path'
    );

    const framework = f.input('framework') as HTMLSelectElement;
    expect([...framework.options].map(o => o.textContent)).toEqual(['pytorch', 'huggingface']);
    expect(framework.selectedOptions[0].textContent).toBe('pytorch');
    expect((f.input('bf16') as HTMLInputElement).type).toBe('checkbox');
  });

  it('reads typed values and omits empty optional ones', () => {
    const f = form();
    f.setValues({ name: 'tiny', base_model: 'sshleifer/tiny-gpt2', dataset_path: '/d.jsonl', epochs: 3 });
    (f.input('framework') as HTMLSelectElement).value = '1';
    const { value, errors } = f.getValue();
    expect(errors).toEqual([]);
    expect(value).toEqual({
      name: 'tiny',
      base_model: 'sshleifer/tiny-gpt2',
      dataset_path: '/d.jsonl',
      framework: 'huggingface',
      epochs: 3,
      batch_size: 8,
      workers: 1,
      lora_rank: 8,
      bf16: false
    });
  });

  it('shows client-side errors under their fields', () => {
    const f = form();
    (f.input('epochs') as HTMLInputElement).value = '0';
    const { errors } = f.validate();
    expect(errors.map(e => e.field).sort()).toEqual(['base_model', 'dataset_path', 'epochs', 'name']);
    const err = f.node.querySelector('[data-field="epochs"] .jp-CleverThis-fieldError');
    expect(err?.textContent).toMatch(/at least 1/);
    // Typing clears the field's error.
    f.input('epochs')!.dispatchEvent(new Event('input'));
    expect(f.node.querySelector('[data-field="epochs"] .jp-CleverThis-fieldError')).toBeNull();
  });

  it('maps server errors to fields; unknown fields go to the form message', () => {
    const f = form();
    const unmatched = f.setErrors([
      { field: 'epochs', message: 'Input should be greater than or equal to 1' },
      { field: 'body.workers', message: 'too many workers' },
      { field: 'nonexistent', message: 'odd' }
    ]);
    expect(f.node.querySelector('[data-field="epochs"] .jp-CleverThis-fieldError')!.textContent).toBe(
      'Input should be greater than or equal to 1'
    );
    expect(f.node.querySelector('[data-field="workers"] .jp-CleverThis-fieldError')!.textContent).toContain(
      'too many workers'
    );
    expect(unmatched).toEqual([{ field: 'nonexistent', message: 'odd' }]);
    expect(f.node.querySelector('.jp-CleverThis-formError')!.textContent).toContain('nonexistent: odd');
    f.clearErrors();
    expect(f.node.querySelectorAll('.jp-CleverThis-fieldError').length).toBe(0);
  });

  it('hides fields of other job types and does not read them', () => {
    const f = form();
    f.filterJobType('train');
    expect(f.row('lora_rank')!.style.display).toBe('none');
    expect('lora_rank' in f.getValue().value).toBe(false);
    f.filterJobType('finetune');
    expect(f.row('lora_rank')!.style.display).toBe('');
    expect(f.getValue().value.lora_rank).toBe(8);
  });
});
