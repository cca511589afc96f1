import { summaryAsDetail } from '../src/shared';
import type {
  ICheckpoint,
  IClusterResources,
  IJobDetail,
  IJobSummary,
  IJSONSchema,
  IPlan,
  IPreflight,
  IQueuedReason,
  ISchemaBundle,
  IServing,
  ITracking
} from '../src/shared';

/** What pydantic v2's `JobSpec.model_json_schema()` looks like. */
export const JOB_SPEC_SCHEMA: IJSONSchema = {
  $defs: {
    Framework: { enum: ['pytorch', 'huggingface'], title: 'Framework', type: 'string' }
  },
  properties: {
    name: {
      description: 'Unique job name',
      pattern: '^[a-z0-9][a-z0-9-]{0,62}$',
      'x-pattern-message': 'use lowercase letters, digits or -, starting with a letter or digit',
      title: 'Job name',
      type: 'string'
    },
    cluster: { default: 'local', title: 'Cluster', type: 'string' },
    base_model: { description: 'Hugging Face model id or path', title: 'Base Model', type: 'string' },
    dataset_path: { title: 'Dataset Path', type: 'string' },
    job_type: { default: 'train', enum: ['train', 'finetune'], title: 'Job Type', type: 'string' },
    framework: { $ref: '#/$defs/Framework', default: 'pytorch' },
    epochs: { default: 1, maximum: 1000, minimum: 1, title: 'Epochs', type: 'integer' },
    batch_size: { default: 8, exclusiveMinimum: 0, title: 'Batch Size', type: 'integer' },
    workers: { default: 1, maximum: 64, minimum: 1, title: 'Workers', type: 'integer' },
    learning_rate: {
      anyOf: [{ type: 'number' }, { type: 'null' }],
      default: null,
      title: 'Learning Rate'
    },
    lora_rank: {
      default: 8,
      minimum: 1,
      title: 'LoRA rank',
      type: 'integer',
      job_types: ['finetune']
    },
    bf16: { default: false, title: 'Bf16', type: 'boolean' },
    training_config: {
      anyOf: [{ additionalProperties: true, type: 'object' }, { type: 'null' }],
      default: null,
      title: 'Training Config'
    }
  },
  required: ['name', 'base_model', 'dataset_path'],
  title: 'JobSpec',
  type: 'object'
};

export const SCHEMA_BUNDLE: ISchemaBundle = {
  job_spec: JOB_SPEC_SCHEMA,
  training_config: {
    properties: {
      learning_rate: { default: 2e-5, title: 'Learning Rate', type: 'number' },
      warmup_steps: { default: 0, title: 'Warmup Steps', type: 'integer' }
    },
    title: 'TrainingConfig',
    type: 'object'
  }
};

export function makeJob(i: number, overrides: Partial<IJobSummary> = {}): IJobSummary {
  return {
    name: `job-${String(i).padStart(4, '0')}`,
    cluster: 'local',
    parent: null,
    trials: null,
    status: 'succeeded',
    ray_status: 'SUCCEEDED',
    job_type: i % 2 ? 'finetune' : 'train',
    framework: 'pytorch',
    base_model: 'sshleifer/tiny-gpt2',
    dataset_path: '/data/tiny.jsonl',
    epochs: 2,
    batch_size: 4,
    workers: 1,
    owner: `user${i % 3}`,
    created_at: 1_700_000_000 + i,
    started_at: 1_700_000_010 + i,
    ended_at: 1_700_000_100 + i,
    elapsed_s: 90,
    message: null,
    ...overrides
  };
}

/** A checkpoint as the server lists it (fields it does not know are null). */
export function makeCheckpoint(name: string, path: string, overrides: Partial<ICheckpoint> = {}): ICheckpoint {
  return {
    name, path, epoch: null, step: null, train_loss: null, eval_loss: null, adapter_path: null, size_bytes: null,
    marks: [], snippet: null, ...overrides
  };
}

export function makeDetail(overrides: Partial<IJobDetail> = {}): IJobDetail {
  return {
    ...summaryAsDetail(makeJob(1)),
    name: 'tiny-ft',
    status: 'running',
    started_at: 1_700_000_000,
    ended_at: null,
    elapsed_s: 30,
    spec: {
      name: 'tiny-ft',
      cluster: 'local',
      base_model: 'sshleifer/tiny-gpt2',
      epochs: 2,
      training_config: { learning_rate: 0.001 }
    },
    checkpoint_dir: '/ckpt/tiny-ft',
    checkpoints: [makeCheckpoint('epoch-1', '/ckpt/tiny-ft/epoch-1', { epoch: 1, step: 40 })],
    metrics: { step: 40, total_steps: 80, loss: 2.34567, learning_rate: 0.001, tokens_per_s: 1234.5, eta_s: 125, epoch: 1 },
    error: null,
    log_url: '/cleverthis/api/clusters/local/jobs/tiny-ft/logs',
    ...overrides
  };
}

/** A pre-flight answer as the server sends it (what it did not establish is null). */
export function makePreflight(overrides: Partial<IPreflight> = {}): IPreflight {
  return {
    errors: [],
    warnings: [],
    training_config_file: null,
    dataset: null,
    training_config: null,
    checkpoint_dir: null,
    checkpoint_owner: null,
    resume_from: null,
    token_lengths: null,
    parameters: null,
    plan: null,
    chat_template: null,
    lora_target_modules: null,
    preview: [],
    ...overrides
  };
}

/** A plan (`JobDetail.plan`, the pre-flight's `plan`). */
export function makePlan(overrides: Partial<IPlan> = {}): IPlan {
  return {
    method: null,
    precision: null,
    strategy: null,
    gradient_checkpointing: null,
    batching: null,
    memory_estimate_gb: {},
    reasons: {},
    parameters: null,
    chat_template: null,
    lora_target_modules: null,
    optim: null,
    attn_implementation: null,
    memory_per_worker_gb: {},
    ...overrides
  };
}

/** `JobDetail.tracking`: the trackers given, the others null (their fields not given are null too). */
export function makeTracking(trackers: {
  tensorboard?: Partial<NonNullable<ITracking['tensorboard']>>;
  mlflow?: Partial<NonNullable<ITracking['mlflow']>>;
  wandb?: Partial<NonNullable<ITracking['wandb']>>;
}): ITracking {
  const { tensorboard, mlflow, wandb } = trackers;
  return {
    tensorboard: tensorboard ? { log_dir: null, viewer: false, ...tensorboard } : null,
    mlflow: mlflow ? { run_id: null, experiment_id: null, tracking_uri: null, url: null, ...mlflow } : null,
    wandb: wandb ? { run_id: null, dir: null, url: null, mode: null, ...wandb } : null
  };
}

export function makeServing(overrides: Partial<IServing> & { model_path: string }): IServing {
  return { lora_adapter_path: null, base_model: null, ...overrides };
}

export function makeQueuedReason(message: string, suggestions: string[] = []): IQueuedReason {
  return {
    requested: { workers: 1, per_worker: { CPU: 1 }, total: { CPU: 1 }, strategy: 'PACK' },
    free: { CPU: 0 },
    nodes: [],
    message,
    blockers: [],
    suggestions,
    fits_now: 0,
    fits_ever: 1
  };
}

/** A cluster's resources: the kinds given, the others null. */
export function makeResources(kinds: Partial<Omit<IClusterResources, 'nodes'>> = {}): IClusterResources {
  return { CPU: null, GPU: null, memory: null, nodes: [], ...kinds };
}
