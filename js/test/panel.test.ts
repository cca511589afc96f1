import { describe, expect, it, vi, type Mock } from 'vitest';

// The real ui-components import .svg files; the panel only needs two icons.
vi.mock('@jupyterlab/ui-components', () => {
  class LabIcon {
    constructor(readonly options: { name: string; svgstr: string }) {}
    element() {
      return document.createElement('span');
    }
  }
  const icon = { element: () => document.createElement('span') };
  return { LabIcon, launchIcon: icon, refreshIcon: icon };
});

import { Widget } from '@lumino/widgets';

import { TrainingPanel } from '../src/panel';
import { IClusterInfo, ITransport } from '../src/shared';
import { makeDetail, makeJob, makeResources, makeTracking } from './fixtures';

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

/** A panel showing the first job's detail, and its "Open in TensorBoard" button. */
async function tensorBoardButton(transport: ITransport): Promise<[TrainingPanel, HTMLButtonElement]> {
  const panel = new TrainingPanel({ transport, defaultCluster: 'local' });
  Widget.attach(panel, document.body);
  await panel.refresh();
  (panel.node.querySelector('.jp-CleverThis-JobTable-row') as HTMLElement).click();
  await panel.refresh();
  return [panel, panel.node.querySelector('.jp-CleverThis-JobDetail-tensorboard') as HTMLButtonElement];
}

describe('TrainingPanel', () => {
  it('has the panel id, lists clusters and jobs, and opens a job', async () => {
    const transport = fakeTransport();
    const panel = new TrainingPanel({ transport, defaultCluster: 'local' });
    expect(panel.id).toBe('jp-CleverThis-training');
    Widget.attach(panel, document.body);
    await panel.refresh();

    const select = panel.node.querySelector('select') as HTMLSelectElement;
    expect([...select.options].map(o => o.textContent)).toEqual(['local (running)', 'gpu (unreachable)']);
    expect(panel.cluster).toBe('local');
    expect(panel.node.querySelector('.jp-CleverThis-resources')!.textContent).toContain('CPU 1/2 free');
    expect(panel.table.jobs.map(j => j.name)).toEqual(['job-0002', 'job-0001']);

    (panel.node.querySelector('.jp-CleverThis-JobTable-row') as HTMLElement).click();
    expect(panel.view).toBe('detail');
    await panel.refresh();
    expect(transport.getJob).toHaveBeenCalledWith('local', 'job-0002');
    expect(transport.getEvents).toHaveBeenLastCalledWith('local', 'job-0002', 1);
    expect(panel.node.querySelector('.jp-CleverThis-LogView-text')!.textContent).toBe('log text');

    (panel.node.querySelector('.jp-CleverThis-back') as HTMLElement).click();
    expect(panel.view).toBe('list');
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

  it('keeps a refused cancel\'s reason on screen across refreshes', async () => {
    const transport = fakeTransport();
    transport.getJob.mockResolvedValue(makeDetail({ status: 'running' }));
    transport.cancelJob.mockRejectedValue(new Error("job 'job-0001' belongs to alice"));
    const panel = new TrainingPanel({ transport, defaultCluster: 'local' });
    Widget.attach(panel, document.body);
    await panel.refresh();
    (panel.node.querySelector('.jp-CleverThis-JobTable-row') as HTMLElement).click();
    await panel.refresh();
    (panel.node.querySelector('.jp-CleverThis-JobDetail-cancel') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(transport.cancelJob).toHaveBeenCalled());
    await panel.refresh();
    await panel.refresh();
    const bar = panel.node.querySelector('.jp-CleverThis-errorBar') as HTMLElement;
    expect(bar.style.display).toBe('');
    expect(bar.textContent).toContain('belongs to alice');
    panel.dispose();
  });

  it('opens the job\'s TensorBoard in a new tab, and says why when it cannot', async () => {
    const transport = fakeTransport();
    const tracking = makeTracking({ tensorboard: { log_dir: '/ckpt/runs/job-0001', viewer: true } });
    transport.getJob.mockResolvedValue(makeDetail({ status: 'running', tracking }));
    transport.openTensorBoard = vi.fn().mockResolvedValue({ url: '/user/a/cleverthis/tensorboard/abc/', log_dir: '/ckpt/runs', run: 'job-0001' });
    const tab = { opener: {}, location: { href: '' }, close: vi.fn() };
    const open = vi.spyOn(window, 'open').mockReturnValue(tab as unknown as Window);
    const [panel, button] = await tensorBoardButton(transport);
    expect(button.style.display).toBe('');
    button.click();
    await vi.waitFor(() => expect(tab.location.href).toBe('/user/a/cleverthis/tensorboard/abc/'));
    expect(transport.openTensorBoard).toHaveBeenCalledWith('local', 'tiny-ft');
    expect(tab.opener).toBeNull();
    (transport.openTensorBoard as Mock).mockRejectedValue(new Error('TensorBoard is not installed on this Jupyter server'));
    button.click();
    await vi.waitFor(() => expect(tab.close).toHaveBeenCalled());
    const bar = panel.node.querySelector('.jp-CleverThis-errorBar') as HTMLElement;
    expect(bar.textContent).toContain('Cannot open TensorBoard for tiny-ft: TensorBoard is not installed');
    open.mockRestore();
    panel.dispose();
  });

  it('offers no TensorBoard where the server cannot show the folder', async () => {
    const transport = fakeTransport();
    transport.getJob.mockResolvedValue(makeDetail({ tracking: makeTracking({ tensorboard: { log_dir: 's3://b/runs/j', viewer: false } }) }));
    transport.openTensorBoard = vi.fn();
    const [panel, button] = await tensorBoardButton(transport);
    expect(button.style.display).toBe('none');
    panel.dispose();
  });

  it('applies the refresh interval setting', () => {
    const panel = new TrainingPanel({ transport: fakeTransport(), refreshInterval: 3 });
    expect(panel.refreshInterval).toBe(3);
    panel.refreshInterval = 10;
    expect(panel.refreshInterval).toBe(10);
    panel.dispose();
  });
});
