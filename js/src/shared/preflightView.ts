/**
 * The pre-flight answer under the Create Job form: a table of the dataset, token lengths, memory and the
 * automatic choices with their reasons, and the first examples as the model sees them.
 */
import { CSS_PREFIX, h } from './format';
import { IPreflight, IPreviewRun } from './model';

/** The pre-flight answer as a small table: format, examples, token lengths, memory, choices with reasons. */
export function renderPlan(plan: IPreflight): HTMLElement {
  const rows: [string, string][] = [];
  const ds = plan.dataset;
  if (ds) {
    rows.push(['Dataset', `${ds.format} \u00b7 ${ds.examples} examples${ds.validation_examples ? ` + ${ds.validation_examples} validation` : ''}`]);
    const formats = Object.entries(ds.formats ?? {});
    if (formats.length > 1) {
      // records are detected one by one: a folder may mix the conversational formats
      rows.push(['Formats', formats.map(([name, n]) => `${name} ${n}`).join(', ')]);
    }
  }
  const tl = plan.token_lengths;
  if (tl) {
    rows.push(['Token lengths', `mean ${tl.mean}, p95 ${tl.p95}, max ${tl.max} (${tl.truncated} truncated)`]);
  }
  const p = plan.plan;
  if (p?.memory_estimate_gb && Object.keys(p.memory_estimate_gb).length) {
    rows.push(['Memory estimate', Object.entries(p.memory_estimate_gb).map(([k, v]) => `${k} ~${v} GB`).join(', ')]);
  }
  for (const [key, reason] of Object.entries(p?.reasons ?? {})) {
    rows.push([key, reason]);
  }
  if (plan.checkpoint_dir) {
    rows.push(['Checkpoints', plan.checkpoint_dir]);
  }
  for (const e of plan.errors ?? []) {
    rows.push([`Problem (${e.field})`, e.message]);
  }
  for (const w of plan.warnings ?? []) {
    rows.push(['Warning', w]);
  }
  const body = h('tbody');
  for (const [k, v] of rows) {
    body.appendChild(h('tr', { 'data-key': k }, h('th', { scope: 'row' }, k), h('td', null, v)));
  }
  const table = h('table', { class: `${CSS_PREFIX}-kvTable` }, body);
  const preview = plan.preview ?? [];
  return preview.length ? h('div', null, table, renderPreview(preview)) : table;
}

/** The first examples as the model sees them, the tokens that count toward the loss highlighted. */
export function renderPreview(examples: IPreviewRun[][]): HTMLElement {
  const items = examples.map((runs, i) => {
    const trained = runs.filter(r => r.trained).reduce((n, r) => n + r.tokens, 0);
    const total = runs.reduce((n, r) => n + r.tokens, 0);
    const text = h(
      'pre',
      { class: `${CSS_PREFIX}-previewText` },
      ...runs.map(r =>
        r.trained
          ? h('mark', { class: `${CSS_PREFIX}-trained`, title: 'trained: counts toward the loss' }, r.text)
          : h('span', { class: `${CSS_PREFIX}-untrained` }, r.text)
      )
    );
    return h(
      'li',
      { 'data-example': String(i + 1) },
      h('div', { class: `${CSS_PREFIX}-previewHead` }, `Example ${i + 1}: ${trained} of ${total} tokens trained`),
      text
    );
  });
  return h(
    'section',
    { class: `${CSS_PREFIX}-preview`, 'aria-label': 'What is trained' },
    h('h4', null, 'What is trained (highlighted tokens count toward the loss)'),
    h('ol', null, ...items)
  );
}
