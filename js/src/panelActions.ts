/**
 * What the Training panel's job detail buttons do: cancel (after the
 * confirmation), resume, and open the job's TensorBoard.  An action's error
 * goes to the panel's error bar; success clears it.
 */
import { ICheckpoint, IJobDetail, ITransport, errorMessage } from './shared';

/** What the actions need of the panel. */
export interface IPanelActionsHost {
  readonly transport: ITransport;
  /** The selected cluster: the cluster of a job that names none. */
  cluster(): string | null;
  /** The job shown in the detail view. */
  jobName(): string | null;
  /** Asks the user to confirm a cancellation; no confirmation when omitted. */
  confirmCancel?: (job: IJobDetail) => Promise<boolean>;
  /** Show (null: clear) the error of an action. */
  showActionError(message: string | null): void;
  /** Show a job's details (a resume's new job). */
  showJob(name: string): void;
  /** Show the detail answered by an action. */
  setDetail(job: IJobDetail): void;
  refresh(): Promise<void>;
}

export class PanelActions {
  constructor(private readonly _host: IPanelActionsHost) {}

  async cancel(job: IJobDetail): Promise<void> {
    const host = this._host;
    if (host.confirmCancel && !(await host.confirmCancel(job))) {
      return;
    }
    try {
      const updated = await host.transport.cancelJob(this._cluster(job), job.name);
      if (host.jobName() === updated.name) {
        host.setDetail(updated);
      }
      host.showActionError(null);
    } catch (err) {
      host.showActionError(`Cannot cancel ${job.name}: ${errorMessage(err)}`);
    }
    void host.refresh();
  }

  async resume(job: IJobDetail, checkpoint?: ICheckpoint): Promise<void> {
    const host = this._host;
    try {
      const created = await host.transport.resumeJob(
        this._cluster(job),
        job.name,
        checkpoint ? { checkpoint: checkpoint.name } : {}
      );
      host.showActionError(null);
      host.showJob(created.name);
    } catch (err) {
      host.showActionError(`Cannot resume ${job.name}: ${errorMessage(err)}`);
    }
  }

  /** A new tab at once (still the user's click, so no popup blocker), sent to the TensorBoard once it runs. */
  async openTensorBoard(job: IJobDetail): Promise<void> {
    const host = this._host;
    const tab = window.open('', '_blank');
    try {
      const tb = await host.transport.openTensorBoard!(this._cluster(job), job.name);
      if (tab) {
        tab.opener = null;
        tab.location.href = tb.url;
      } else {
        window.open(tb.url, '_blank', 'noopener');
      }
      host.showActionError(null);
    } catch (err) {
      tab?.close();
      host.showActionError(`Cannot open TensorBoard for ${job.name}: ${errorMessage(err)}`);
    }
  }

  private _cluster(job: IJobDetail): string {
    return job.cluster || this._host.cluster() || '';
  }
}
