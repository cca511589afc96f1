import { describe, expect, it, vi } from 'vitest';

import { NodesView } from '../src/nodesView';
import { INodeResources } from '../src/shared';

const NODES: INodeResources[] = [
  {
    node_id: 'aaaaaaaa11', name: '10.0.0.1', ip: '10.0.0.1', head: true,
    CPU: { total: 4, free: 1 }, GPU: null, memory: { total: 8 * 1024 ** 3, free: 2 * 1024 ** 3 },
    used_by: [{ job: 'big-run', CPU: 3, GPU: null }]
  },
  { node_id: 'bbbbbbbb22', name: '10.0.0.2', ip: '10.0.0.2', head: false, CPU: { total: 2, free: 2 }, GPU: { total: 1, free: 0.5 }, memory: null, used_by: [] }
];

describe('NodesView', () => {
  it('loads only when opened, lists each node with what is free and who holds it, and reloads while open', async () => {
    const load = vi.fn().mockResolvedValue(NODES);
    const view = new NodesView({ load });
    document.body.appendChild(view.node);
    expect(view.node.style.display).toBe('none');
    view.setCluster('local');
    expect(view.node.style.display).toBe('');
    expect(load).not.toHaveBeenCalled(); // closed: nothing asked
    view.node.open = true;
    await view.refresh();
    expect(load).toHaveBeenCalledWith('local');
    const rows = [...view.node.querySelectorAll('.jp-CleverThis-nodes-row')].map(r =>
      [...r.querySelectorAll('td')].map(td => td.textContent)
    );
    expect(rows).toEqual([
      ['10.0.0.1 (head)', '1 of 4', '\u2014', '2.0 GB of 8.0 GB', 'big-run (3 CPU)'],
      ['10.0.0.2', '2 of 2', '0.50 of 1', '\u2014', '\u2014']
    ]);
    expect(view.node.querySelector('summary')?.textContent).toBe('Nodes (2)');
    load.mockRejectedValueOnce(new Error('cluster stopped'));
    await view.refresh();
    expect(view.node.querySelector('.jp-CleverThis-nodes-status')?.textContent).toBe('Could not list the nodes: cluster stopped');
    view.setCluster(null);
    expect(view.node.style.display).toBe('none');
    view.node.remove();
  });
});
