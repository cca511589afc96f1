import { describe, expect, it, vi, type Mock } from 'vitest';

vi.mock('@jupyterlab/ui-components', () => import('./uiComponentsMock'));

import { Widget } from '@lumino/widgets';

import { JobTab } from '../src/jobTab';
import { ILogTailHandlers, ITransport } from '../src/shared';
import { makeDetail, makeTracking } from './fixtures';

function fakeTransport(): ITransport & { [K in keyof ITransport]: Mock } {
  return {
    listClusters: vi.fn(),
    listJobs: vi.fn(),
    getJob: vi.fn().mockResolvedValue(makeDetail({ status: 'running' })),
    createJob: vi.fn(),
    cancelJob: vi.fn().mockResolvedValue(makeDetail({ status: 'cancelled' })),
    resumeJob: vi.fn().mockResolvedValue(makeDetail({ name: 'tiny-ft-resume-1', status: 'queued' })),
    planJob: vi.fn(),
    getLogs: vi.fn().mockResolvedValue('log text'),
    getEvents: vi.fn().mockResolvedValue({ events: [{ i: 1, type: 'phase' }], next: 1 }),
    getSchema: vi.fn()
  } as any;
}

function openTab(transport: ITransport, extra: Partial<ConstructorParameters<typeof JobTab>[0]> = {}): JobTab {
  const tab = new JobTab({ transport, cluster: 'local', name: 'tiny-ft', ...extra });
  Widget.attach(tab, document.body);
  return tab;
}

describe('JobTab', () => {
  it('is one closable tab per job, following its detail, events and log', async () => {
    const transport = fakeTransport();
    const tab = openTab(transport);
    expect(tab.id).toBe(JobTab.idOf('local', 'tiny-ft'));
    expect(JobTab.idOf('local', 'a/b')).not.toBe(JobTab.idOf('local', 'a_b')); // distinct ids for distinct names
    expect(JobTab.idOf('local', 'a_2Fb')).not.toBe(JobTab.idOf('local', 'a/b'));
    expect(JobTab.idOf('a-b', 'c')).not.toBe(JobTab.idOf('a', 'b-c')); // a "-" in a cluster's name
    expect(JobTab.idOf('local', 'ui-short-12')).toBe('jp-CleverThis-job-local-ui-short-12'); // plain names as is
    expect(tab.title.label).toBe('tiny-ft');
    expect(tab.title.closable).toBe(true);
    await tab.refresh();
    expect(transport.getJob).toHaveBeenCalledWith('local', 'tiny-ft');
    await tab.refresh();
    expect(transport.getEvents).toHaveBeenLastCalledWith('local', 'tiny-ft', 1); // only what is new
    expect(tab.node.querySelector('.jp-CleverThis-JobDetail-name')!.textContent).toBe('tiny-ft');
    expect(tab.node.querySelector('.jp-CleverThis-LogView-text')!.textContent).toBe('log text');
    tab.dispose();
  });

  it('follows the log over the tail instead of fetching it each refresh', async () => {
    const transport = fakeTransport();
    let handlers!: ILogTailHandlers;
    const close = vi.fn();
    transport.tailLogs = vi.fn((_c: string, _n: string, h: ILogTailHandlers) => {
      handlers = h;
      return { close };
    });
    const tab = openTab(transport);
    handlers.onText('line 1\n');
    handlers.onText('line 2\n');
    await tab.refresh();
    expect(transport.getLogs).not.toHaveBeenCalled();
    expect(tab.node.querySelector('.jp-CleverThis-LogView-text')!.textContent).toBe('line 1\nline 2\n');
    tab.dispose();
    expect(close).toHaveBeenCalled();
  });

  it('keeps a refused cancel\'s reason on screen across refreshes', async () => {
    const transport = fakeTransport();
    transport.cancelJob.mockRejectedValue(new Error("job 'tiny-ft' belongs to alice"));
    const tab = openTab(transport);
    await tab.refresh();
    (tab.node.querySelector('.jp-CleverThis-JobDetail-cancel') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(transport.cancelJob).toHaveBeenCalled());
    await tab.refresh();
    await tab.refresh();
    const bar = tab.node.querySelector('.jp-CleverThis-errorBar') as HTMLElement;
    expect(bar.style.display).toBe('');
    expect(bar.textContent).toContain('belongs to alice');
    tab.dispose();
  });

  it('opens a resume\'s new job in its own tab', async () => {
    const transport = fakeTransport();
    transport.getJob.mockResolvedValue(makeDetail({ status: 'cancelled' }));
    const openJob = vi.fn();
    const tab = openTab(transport, { openJob });
    await tab.refresh();
    (tab.node.querySelector('.jp-CleverThis-JobDetail-resume') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(openJob).toHaveBeenCalledWith('local', 'tiny-ft-resume-1'));
    tab.dispose();
  });

  it('opens the job\'s TensorBoard in a new browser tab, and says why when it cannot', async () => {
    const transport = fakeTransport();
    const tracking = makeTracking({ tensorboard: { log_dir: '/ckpt/runs/tiny-ft', viewer: true } });
    transport.getJob.mockResolvedValue(makeDetail({ status: 'running', tracking }));
    transport.openTensorBoard = vi.fn().mockResolvedValue({ url: '/user/a/cleverthis/tensorboard/abc/', log_dir: '/ckpt/runs', run: 'tiny-ft' });
    const browserTab = { opener: {}, location: { href: '' }, close: vi.fn() };
    const open = vi.spyOn(window, 'open').mockReturnValue(browserTab as unknown as Window);
    const tab = openTab(transport);
    await tab.refresh();
    const button = tab.node.querySelector('.jp-CleverThis-JobDetail-tensorboard') as HTMLButtonElement;
    expect(button.style.display).toBe('');
    button.click();
    await vi.waitFor(() => expect(browserTab.location.href).toBe('/user/a/cleverthis/tensorboard/abc/'));
    expect(transport.openTensorBoard).toHaveBeenCalledWith('local', 'tiny-ft');
    expect(browserTab.opener).toBeNull();
    (transport.openTensorBoard as Mock).mockRejectedValue(new Error('TensorBoard is not installed on this Jupyter server'));
    button.click();
    await vi.waitFor(() => expect(browserTab.close).toHaveBeenCalled());
    const bar = tab.node.querySelector('.jp-CleverThis-errorBar') as HTMLElement;
    expect(bar.textContent).toContain('Cannot open TensorBoard for tiny-ft: TensorBoard is not installed');
    open.mockRestore();
    tab.dispose();
  });

  it('offers no TensorBoard where the server cannot show the folder', async () => {
    const transport = fakeTransport();
    transport.getJob.mockResolvedValue(makeDetail({ tracking: makeTracking({ tensorboard: { log_dir: 's3://b/runs/j', viewer: false } }) }));
    transport.openTensorBoard = vi.fn();
    const tab = openTab(transport);
    await tab.refresh();
    expect((tab.node.querySelector('.jp-CleverThis-JobDetail-tensorboard') as HTMLElement).style.display).toBe('none');
    tab.dispose();
  });
});
