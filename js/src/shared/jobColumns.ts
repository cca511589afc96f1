/**
 * The columns of the job table: their headers, cell texts and sort values.
 */
import { formatTimestamp, jobElapsed, jobTypeLabel } from './format';
import { IJobSummary } from './model';

/** Columns the table can show. */
export type JobColumn = 'name' | 'status' | 'job_type' | 'owner' | 'elapsed' | 'created_at';

/** Sort direction. */
export type SortDirection = 'asc' | 'desc';

/** Every column, in the default order. */
export const JOB_COLUMNS: readonly JobColumn[] = [
  'name',
  'status',
  'job_type',
  'owner',
  'elapsed',
  'created_at'
];

/** The header text of each column. */
export const JOB_COLUMN_HEADERS: Record<JobColumn, string> = {
  name: 'Name',
  status: 'Status',
  job_type: 'Type',
  owner: 'Owner',
  elapsed: 'Elapsed',
  created_at: 'Created'
};

/** The text of a plain-text cell (status and elapsed cells are built by the table). */
export function jobCellText(job: IJobSummary, column: JobColumn): string {
  switch (column) {
    case 'name':
      return job.name;
    case 'job_type':
      return jobTypeLabel(job.job_type);
    case 'owner':
      return job.owner || '\u2014';
    case 'created_at':
      return formatTimestamp(job.created_at);
    default:
      return '';
  }
}

/** What a row shows: a pooled row is only rewritten when this changes. */
export function jobRowKey(job: IJobSummary, elapsed: string): string {
  return [job.name, job.status, job.job_type, job.owner, job.created_at, elapsed, job.message].join(
    '\u0000'
  );
}

/** The value a column sorts by. */
export function jobSortValue(job: IJobSummary, column: JobColumn, now: number): string | number {
  switch (column) {
    case 'elapsed':
      return jobElapsed(job, now) ?? -1;
    case 'created_at':
      return typeof job.created_at === 'number' ? job.created_at : 0;
    case 'owner':
      return job.owner ?? '';
    case 'status':
      return job.status ?? '';
    case 'job_type':
      return job.job_type ?? '';
    default:
      return job.name;
  }
}
