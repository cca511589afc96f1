/**
 * The main-area job tabs: one per job, side by side as the user arranges them, restored by JupyterLab after a
 * reload (the layout restorer re-runs `cleverthis:open-job` with each tab's cluster and name).
 */
import { ILayoutRestorer, JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';

import { IJobTabOptions, JobTab } from './jobTab';

/** What every tab gets (the transport, the confirmations and the actions that leave the tab). */
export type JobTabDefaults = Omit<IJobTabOptions, 'cluster' | 'name' | 'openJob'>;

export class JobTabs {
  constructor(
    private readonly _app: JupyterFrontEnd,
    private readonly _defaults: JobTabDefaults
  ) {
    this.tracker = new WidgetTracker<MainAreaWidget<JobTab>>({ namespace: 'cleverthis-job' });
  }

  /** The open tabs (the restorer saves them). */
  readonly tracker: WidgetTracker<MainAreaWidget<JobTab>>;

  /** Seconds between a running job's refreshes, for the tabs opened from now on. */
  refreshInterval = 3;

  /** The tab of the focused job, if the current main-area widget is one. */
  get current(): JobTab | null {
    return this.tracker.currentWidget?.content ?? null;
  }

  /** Restore the tabs of the last session with `command` (which opens a tab from `{cluster, name}`). */
  restore(restorer: ILayoutRestorer, command: string): void {
    void restorer.restore(this.tracker, {
      command,
      args: w => ({ cluster: w.content.cluster, name: w.content.name }),
      name: w => `${w.content.cluster}/${w.content.name}`
    });
  }

  /** The open tab of a job, if any. */
  find(cluster: string, name: string): JobTab | null {
    return this.tracker.find(w => w.content.cluster === cluster && w.content.name === name)?.content ?? null;
  }

  /** Show a job's tab, opening it if needed. */
  open(cluster: string, name: string): MainAreaWidget<JobTab> {
    const existing = this.tracker.find(w => w.content.cluster === cluster && w.content.name === name);
    if (existing) {
      this._app.shell.activateById(existing.id);
      return existing;
    }
    const content = new JobTab({
      ...this._defaults,
      refreshInterval: this.refreshInterval,
      cluster,
      name,
      openJob: (c, n) => void this.open(c, n)
    });
    const widget = new MainAreaWidget({ content });
    widget.id = `${content.id}-tab`;
    widget.title.label = content.title.label;
    widget.title.caption = content.title.caption;
    widget.title.icon = content.title.icon;
    widget.title.closable = true;
    void this.tracker.add(widget);
    this._app.shell.add(widget, 'main', { mode: 'tab-after' });
    this._app.shell.activateById(widget.id);
    return widget;
  }
}
