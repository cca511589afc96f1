import { describe, expect, it, vi, type Mock } from 'vitest';

vi.mock('@jupyterlab/ui-components', () => import('./uiComponentsMock'));

import { Widget } from '@lumino/widgets';

import { TrainingPanel } from '../src/panel';
import { IClusterInfo, ITransport } from '../src/shared';
import { makeDetail, makeJob, makeResources } from './fixtures';

const CLUSTERS: IClusterInfo[] = [
  { name: 'local', address: 'http://127.0.0.1:8265', status: 'running', managed: true, resources: makeResources({ CPU: { total: 2, free: 1 } }) },
  { name: 'gpu', address: 'http://gpu:8265', status: 'unreachable', managed: false, resources: null }
];

function fakeTransport(): ITransport & { [K in keyof ITransport]: Mock } {
  return {
    listClusters: vi.fn().mockResolvedValue(CLUSTERS),
    listJobs: vi.fn(async (cluster: string) => (cluster === 'local' ? [makeJob(1), makeJob(2)] : [])),
    getJob: vi.fn().mockResolvedValue(makeDetail()),
    createJob: vi.fn(),
    cancelJob: vi.fn().mockResolvedValue(makeDetail({ status: 'cancelled' })),
    resumeJob: vi.fn().mockResolvedValue(makeDetail({ name: 'job-1-resume-1', status: 'queued' })),
    planJob: vi.fn(),
    getLogs: vi.fn().mockResolvedValue('log text'),
    getEvents: vi.fn().mockResolvedValue({ events: [{ i: 1, type: 'phase' }], next: 1 }),
    getSchema: vi.fn()
  } as any;
}

describe('TrainingPanel', () => {
  it('has the panel id, lists clusters and jobs, and opens a job through onOpenJob', async () => {
    const transport = fakeTransport();
    const onOpenJob = vi.fn();
    const panel = new TrainingPanel({ transport, defaultCluster: 'local', onOpenJob });
    expect(panel.id).toBe('jp-CleverThis-training');
    Widget.attach(panel, document.body);
    await panel.refresh();

    const select = panel.node.querySelector('select') as HTMLSelectElement;
    expect([...select.options].map(o => o.textContent)).toEqual(['local (running)', 'gpu (unreachable)']);
    expect(panel.cluster).toBe('local');
    expect(panel.node.querySelector('.jp-CleverThis-resources')!.textContent).toContain('CPU 1/2 free');
    expect(panel.table.jobs.map(j => j.name)).toEqual(['job-0002', 'job-0001']);

    (panel.node.querySelector('.jp-CleverThis-JobTable-row') as HTMLElement).click();
    expect(onOpenJob).toHaveBeenCalledWith('local', 'job-0002');
    expect(panel.table.selectedName).toBe('job-0002');
    expect(panel.node.querySelector('.jp-CleverThis-JobDetail')).toBeNull(); // the sidebar keeps the list
    panel.dispose();
  });

  it('switches cluster from the selector and shows errors', async () => {
    const transport = fakeTransport();
    const panel = new TrainingPanel({ transport });
    Widget.attach(panel, document.body);
    await panel.refresh();
    expect(panel.cluster).toBe('local');
    const select = panel.node.querySelector('select') as HTMLSelectElement;
    select.value = 'gpu';
    select.dispatchEvent(new Event('change'));
    expect(panel.cluster).toBe('gpu');
    await panel.refresh();
    // A cluster that does not answer: words in the body, no job request, no error bar, no Start (not ours).
    const bar = panel.node.querySelector('.jp-CleverThis-errorBar') as HTMLElement;
    const body = panel.node.querySelector('.jp-CleverThis-clusterEmpty') as HTMLElement;
    expect(body.style.display).toBe('');
    expect(body.textContent).toContain('The cluster \u201cgpu\u201d does not answer at http://gpu:8265.');
    expect(body.querySelector('.jp-CleverThis-startCluster')).toBeNull();
    expect(transport.listJobs).not.toHaveBeenCalledWith('gpu');
    expect(bar.style.display).toBe('none');
    transport.listClusters.mockRejectedValueOnce(new Error('Cannot reach the server'));
    await panel.refresh();
    expect(bar.style.display).toBe('');
    expect(bar.textContent).toContain('Cannot reach the server');
    await panel.refresh();
    expect(bar.style.display).toBe('none');
    panel.dispose();
  });

  it('starts a stopped managed cluster from the body or the header, with progress, then lists its jobs', async () => {
    const transport = fakeTransport();
    let status = 'stopped';
    transport.listClusters.mockImplementation(async () => [{ ...CLUSTERS[0], status, resources: null }]);
    let started!: () => void;
    transport.clusterAction = vi.fn(
      (_cluster: string, action: string) =>
        new Promise<any>(resolve => {
          started = () => {
            status = action === 'up' ? 'running' : 'stopped';
            resolve({ ...CLUSTERS[0], status });
          };
        })
    );
    const panel = new TrainingPanel({
      transport,
      defaultCluster: 'local',
      dashboardUrl: c => `/base/cleverthis/proxy/${c}/`
    });
    Widget.attach(panel, document.body);
    await panel.refresh();
    const body = panel.node.querySelector('.jp-CleverThis-clusterEmpty') as HTMLElement;
    expect(body.textContent).toContain('The cluster \u201clocal\u201d is stopped.');
    expect(transport.listJobs).not.toHaveBeenCalled();
    const headerButton = panel.node.querySelector('.jp-CleverThis-clusterAction') as HTMLButtonElement;
    expect(headerButton.textContent).toBe('Start');
    const link = panel.node.querySelector('.jp-CleverThis-dashboardLink') as HTMLAnchorElement;
    expect(link.style.display).toBe('none');

    (body.querySelector('.jp-CleverThis-startCluster') as HTMLButtonElement).click();
    const progress = panel.node.querySelector('.jp-CleverThis-clusterProgress') as HTMLElement;
    expect(progress.style.display).toBe('');
    expect(progress.textContent).toContain('Starting \u201clocal\u201d');
    expect(headerButton.disabled).toBe(true);
    expect(transport.clusterAction).toHaveBeenCalledWith('local', 'up');
    started();
    await vi.waitFor(() => expect(transport.listJobs).toHaveBeenCalledWith('local'));
    expect(progress.style.display).toBe('none');
    expect(body.style.display).toBe('none');
    expect(headerButton.textContent).toBe('Stop');
    expect(link.style.display).toBe('');
    expect(link.getAttribute('href')).toBe('/base/cleverthis/proxy/local/');
    await vi.waitFor(() => expect(panel.table.jobs.length).toBe(2));

    headerButton.click(); // Stop
    expect(transport.clusterAction).toHaveBeenLastCalledWith('local', 'down');
    started();
    await vi.waitFor(() => expect(body.style.display).toBe(''));
    expect(panel.table.jobs.length).toBe(0);
    panel.dispose();
  });

  it('filters to the signed-in user\'s jobs with "Mine"', async () => {
    const transport = fakeTransport();
    transport.listJobs.mockResolvedValue([makeJob(1, { owner: 'alice' }), makeJob(2, { owner: 'bob' })]);
    const panel = new TrainingPanel({ transport, defaultCluster: 'local', currentUser: () => 'alice' });
    Widget.attach(panel, document.body);
    await panel.refresh();
    expect(panel.table.jobs.map(j => j.owner)).toEqual(['bob', 'alice']); // everyone's jobs, with their owners
    const mine = panel.node.querySelector('.jp-CleverThis-mineFilter') as HTMLInputElement;
    mine.checked = true;
    mine.dispatchEvent(new Event('change'));
    expect(panel.table.jobs.map(j => j.name)).toEqual(['job-0001']);
    panel.dispose();
    const anonymous = new TrainingPanel({ transport });
    expect((anonymous.node.querySelector('.jp-CleverThis-mine') as HTMLElement).style.display).toBe('none');
    anonymous.dispose();
  });

  it('applies the refresh interval setting', () => {
    const panel = new TrainingPanel({ transport: fakeTransport(), refreshInterval: 3 });
    expect(panel.refreshInterval).toBe(3);
    panel.refreshInterval = 10;
    expect(panel.refreshInterval).toBe(10);
    panel.dispose();
  });
});
