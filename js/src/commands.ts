/**
 * The plugin's commands (the palette lists most of them) and the dialogs they show. A job command acts on
 * `args.cluster`/`args.name`, else on the current job tab.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Clipboard, Dialog, InputDialog, MainAreaWidget, Notification, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { Widget } from '@lumino/widgets';

import { CompareTab } from './compareTab';
import { showCreateJobDialog } from './dialog';
import { trainingIcon } from './icon';
import { JobTabs } from './jobTabs';
import { IJobNotice, JobNotifier } from './notifier';
import { TrainingPanel } from './panel';
import { IDataLineOpener, IJobDetail, JobType, cloneName, downloadSummary, errorMessage, h, isActive } from './shared';
import { RestTransport } from './shared/restTransport';

/** Command ids. */
export namespace CommandIDs {
  export const createJob = 'cleverthis:create-job';
  export const refresh = 'cleverthis:refresh';
  export const openDashboard = 'cleverthis:open-dashboard';
  export const openJob = 'cleverthis:open-job';
  export const cloneJob = 'cleverthis:clone-job';
  export const exportJob = 'cleverthis:export-job';
  export const saveTemplate = 'cleverthis:save-template';
  export const cancelJob = 'cleverthis:cancel-job';
  export const resumeJob = 'cleverthis:resume-job';
  export const startCluster = 'cleverthis:start-cluster';
  export const stopCluster = 'cleverthis:stop-cluster';
  export const prefetchModel = 'cleverthis:prefetch-model';
  export const compareJobs = 'cleverthis:compare-jobs';
}

/** The commands the palette lists. */
export const PALETTE_COMMANDS = [
  CommandIDs.createJob,
  CommandIDs.refresh,
  CommandIDs.openDashboard,
  CommandIDs.cloneJob,
  CommandIDs.exportJob,
  CommandIDs.saveTemplate,
  CommandIDs.cancelJob,
  CommandIDs.resumeJob,
  CommandIDs.startCluster,
  CommandIDs.stopCluster,
  CommandIDs.prefetchModel
];

/** What the commands act on. */
export interface ICommandContext {
  panel: TrainingPanel;
  transport: RestTransport;
  notifier: JobNotifier;
  tabs: JobTabs;
  /** "Open at line N" for a dataset error under the create form's dataset field. */
  dataLines?: IDataLineOpener;
}

export function addCommands(app: JupyterFrontEnd, context: ICommandContext): void {
  const { commands } = app;
  const { panel, transport, notifier, tabs } = context;
  const serverSettings = app.serviceManager.serverSettings;
  const target = (args: Record<string, unknown>): { cluster: string; name: string } | null => {
    const cluster = (args.cluster as string | undefined) || tabs.current?.cluster;
    const name = (args.name as string | undefined) || tabs.current?.name;
    return cluster && name ? { cluster, name } : null;
  };
  let setAside: { values: Record<string, unknown>; jobType: JobType } | undefined;
  commands.addCommand(CommandIDs.createJob, {
    label: 'Create Training Job\u2026',
    caption: 'Create a training or fine-tuning job on the selected cluster',
    icon: trainingIcon,
    execute: async args => {
      if (!args.cluster && !panel.cluster) {
        await panel.refresh(); // a click before the panel's first answer: wait for the cluster list
      }
      const cluster = (args.cluster as string | undefined) || panel.cluster;
      if (!cluster) {
        await showErrorMessage('No cluster', 'No Ray cluster is available to run the job on.');
        return null;
      }
      // A stopped cluster of our own: offer to start it first (the first run's path).
      const info = panel.clusters.find(c => c.name === cluster);
      if (info?.managed && info.status !== 'running') {
        const answer = await showDialog({
          title: 'Start the cluster?',
          body: `The cluster \u201c${cluster}\u201d is ${info.status}. Start it on this machine to run the job?`,
          buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Start cluster' })]
        });
        if (!answer.button.accept || !(await panel.clusterAction('up', cluster))) {
          return null;
        }
      }
      const jobType =
        args.job_type === 'train' || args.job_type === 'finetune'
          ? (args.job_type as JobType)
          : undefined;
      // A form set aside to open a dataset's bad line comes back as it was, once.
      const values = (args.values as Record<string, unknown> | undefined) ?? setAside?.values;
      const type = jobType ?? setAside?.jobType;
      setAside = undefined;
      const created = await showCreateJobDialog({
        transport,
        cluster,
        jobType: type,
        values,
        dataLines: context.dataLines,
        onSetAside: (v, t) => (setAside = { values: v, jobType: t })
      });
      if (created) {
        notifier.watch(cluster, created.name, created.status);
        if (panel.cluster !== cluster) {
          panel.cluster = cluster;
        }
        panel.table.selectedName = created.name;
        void panel.refresh();
        tabs.open(cluster, created.name);
      }
      return created;
    }
  });

  commands.addCommand(CommandIDs.compareJobs, {
    label: 'Compare Training Jobs',
    caption: "Overlay the jobs' loss curves and show where their settings differ (args: cluster, names)",
    execute: async args => {
      const cluster = (args.cluster as string | undefined) || panel.cluster;
      const names = (args.names as string[] | undefined) ?? panel.table.marked;
      if (!cluster || names.length < 2) {
        return null;
      }
      const widget = new MainAreaWidget({ content: new CompareTab(transport, cluster, names) });
      widget.id = `${widget.content.id}-tab`;
      widget.title.label = widget.content.title.label;
      widget.title.icon = trainingIcon;
      app.shell.add(widget, 'main', { mode: 'tab-after' });
      app.shell.activateById(widget.id);
      await widget.content.load();
      return widget;
    }
  });

  commands.addCommand(CommandIDs.openJob, {
    label: args => (args.name ? `Open Training Job ${args.name}` : 'Open Training Job'),
    caption: 'Show a job in a tab of the main area',
    execute: args => {
      const job = target(args);
      if (job) {
        notifier.watch(job.cluster, job.name, 'unknown');
        return tabs.open(job.cluster, job.name);
      }
      return undefined;
    }
  });

  /** The spec of a job: the one its open tab shows, else the server's. */
  const specOf = async (job: { cluster: string; name: string }): Promise<Record<string, unknown>> =>
    (tabs.find(job.cluster, job.name)?.detail.job?.spec as Record<string, unknown> | undefined) ||
    (await transport.getSpec(job.cluster, job.name)).spec;

  /** A command on one job (`args`, else the current tab's); its failure is shown under `failure`. */
  const jobCommand = (
    id: string,
    label: string,
    caption: string,
    failure: string,
    run: (job: { cluster: string; name: string }, args: Record<string, unknown>) => Promise<unknown>
  ): void => {
    commands.addCommand(id, {
      label,
      caption,
      isEnabled: args => !!target(args),
      execute: async args => {
        const job = target(args);
        if (!job) {
          return null;
        }
        try {
          return await run(job, args as Record<string, unknown>);
        } catch (err) {
          await showErrorMessage(failure, errorMessage(err));
          return null;
        }
      }
    });
  };

  jobCommand(
    CommandIDs.cloneJob,
    'Create Job from This Job\u2026',
    "The create form, prefilled with the job's spec (or the `spec` given: a failure's fix) and a new name",
    'Cannot copy the job',
    async (job, args) => {
      const given = args.spec as Record<string, unknown> | undefined;
      const { cluster: _cluster, job_type, ...fields } = given ?? (await specOf(job));
      // what was left unset stays unset (the form shows its default), the rest is the job's
      const values: Record<string, unknown> = Object.fromEntries(
        Object.entries(fields).filter(([, v]) => v !== null && v !== undefined)
      );
      values.name = cloneName(job.name, panel.table.jobs.map(j => j.name));
      return commands.execute(CommandIDs.createJob, { cluster: job.cluster, job_type, values } as any);
    }
  );

  jobCommand(
    CommandIDs.exportJob,
    'Export Training Job Spec (YAML)\u2026',
    "The job's spec as YAML that %%train and `cleverthis-train create --config` read",
    'Cannot export the job',
    async job => {
      const exported = await transport.getSpec(job.cluster, job.name);
      const body = new Widget({
        node: h(
          'div',
          null,
          h('p', null, 'Paste into a %%train cell, or save as a file for cleverthis-train create --config.'),
          h('pre', { class: 'jp-CleverThis-exportYaml' }, exported.yaml)
        )
      });
      const result = await showDialog({
        title: `Spec of ${job.name}`,
        body,
        buttons: [Dialog.cancelButton({ label: 'Close' }), Dialog.okButton({ label: 'Copy' })]
      });
      if (result.button.accept) {
        Clipboard.copyToSystem(exported.yaml);
      }
      return exported.yaml;
    }
  );

  jobCommand(
    CommandIDs.saveTemplate,
    'Save Training Job as Template\u2026',
    "Keep the job's spec under a name; the Create Job form offers it",
    'Cannot save the template',
    async job => {
      const answer = await InputDialog.getText({
        title: 'Save as template',
        label: 'Template name (letters, digits, ., _ or -)',
        text: job.name.replace(/-\d+$/, '')
      });
      if (!answer.button.accept || !answer.value) {
        return null;
      }
      const saved = await transport.saveTemplate(answer.value, await specOf(job));
      Notification.success(
        `Template \u201c${saved.name}\u201d saved: Create Job offers it under \u201cStart from template\u201d.`,
        { autoClose: 8000 }
      );
      return saved;
    }
  );

  commands.addCommand(CommandIDs.cancelJob, {
    label: 'Cancel Training Job',
    caption: 'Cancel the job of the current job tab',
    isEnabled: () => !!tabs.current?.detail.job && isActive(tabs.current.detail.job.status),
    execute: () => tabs.current?.cancel()
  });

  commands.addCommand(CommandIDs.resumeJob, {
    label: 'Resume Training Job',
    caption: 'Continue the job of the current job tab from its latest checkpoint',
    isEnabled: () => !!tabs.current?.detail.job && !isActive(tabs.current.detail.job.status),
    execute: () => tabs.current?.resume()
  });

  commands.addCommand(CommandIDs.startCluster, {
    label: 'Start the Local Ray Cluster',
    caption: 'Start the selected cluster jupyter-cleverthis manages on this machine',
    execute: args => panel.clusterAction('up', (args.cluster as string | undefined) || panel.cluster)
  });

  commands.addCommand(CommandIDs.stopCluster, {
    label: 'Stop the Local Ray Cluster',
    caption: 'Stop the selected cluster jupyter-cleverthis manages, and its jobs',
    execute: args => panel.clusterAction('down', (args.cluster as string | undefined) || panel.cluster)
  });

  commands.addCommand(CommandIDs.refresh, {
    label: 'Refresh Training Jobs',
    caption: 'Refresh the clusters and jobs of the Training panel',
    execute: () => panel.refresh()
  });

  commands.addCommand(CommandIDs.openDashboard, {
    label: 'Open Ray Dashboard',
    caption: 'Open the selected cluster\u2019s Ray dashboard in a new browser tab',
    execute: async args => {
      const cluster = (args.cluster as string | undefined) || panel.cluster;
      if (!cluster) {
        await showErrorMessage('No cluster', 'No Ray cluster is selected.');
        return null;
      }
      const url = dashboardUrl(serverSettings.baseUrl, cluster);
      window.open(url, '_blank', 'noopener');
      return url;
    }
  });

  commands.addCommand(CommandIDs.prefetchModel, {
    label: 'Pre-fetch a Model to the Cluster\u2026',
    caption: 'Download a Hugging Face model into the model cache of every node (jobs then start without it)',
    execute: async args => {
      const cluster = (args.cluster as string | undefined) || panel.cluster;
      let model = args.model as string | undefined;
      if (!cluster) {
        return null;
      }
      if (!model) {
        const answer = await InputDialog.getText({ title: `Pre-fetch a model to \u201c${cluster}\u201d`, label: 'Hugging Face model id (org/name)' });
        model = answer.button.accept ? answer.value?.trim() : undefined;
      }
      if (!model) {
        return null;
      }
      const run = transport.downloadModel(cluster, model);
      const id = Notification.emit(`Pre-fetching ${model} on every node of \u201c${cluster}\u201d\u2026`, 'in-progress', { autoClose: false });
      run.then(
        r => Notification.update({ id, type: r.ok ? 'success' : 'warning', autoClose: 10_000, message: downloadSummary(r) }),
        err => Notification.update({ id, type: 'error', autoClose: false, message: `Could not pre-fetch ${model}: ${errorMessage(err)}` })
      );
      return run;
    }
  });
}

/** `<baseUrl>cleverthis/proxy/<cluster>/` */
export function dashboardUrl(baseUrl: string, cluster: string): string {
  return URLExt.join(baseUrl, 'cleverthis/proxy', encodeURIComponent(cluster)) + '/';
}

/** A job's end as a JupyterLab notification, with "Open" (the job's tab). */
export function notify(app: JupyterFrontEnd, notice: IJobNotice): void {
  const actions: Notification.IAction[] = [
    {
      label: 'Open',
      caption: `Show ${notice.name} in a tab`,
      displayType: 'accent',
      callback: () => void app.commands.execute(CommandIDs.openJob, { cluster: notice.cluster, name: notice.name })
    }
  ];
  const options = { autoClose: notice.kind === 'error' ? (false as const) : 15_000, actions };
  Notification[notice.kind](notice.message, options);
}

export async function confirmStop(cluster: string): Promise<boolean> {
  const result = await showDialog({
    title: 'Stop the cluster?',
    body: `Stop \u201c${cluster}\u201d? Jobs still running on it stop with it.`,
    buttons: [Dialog.cancelButton({ label: 'Keep running' }), Dialog.warnButton({ label: 'Stop cluster' })]
  });
  return result.button.accept;
}

export async function confirmCancel(job: IJobDetail): Promise<boolean> {
  const result = await showDialog({
    title: 'Cancel job?',
    body: `Stop the job \u201c${job.name}\u201d on its Ray cluster?`,
    buttons: [Dialog.cancelButton({ label: 'Keep running' }), Dialog.warnButton({ label: 'Cancel job' })]
  });
  return result.button.accept;
}
