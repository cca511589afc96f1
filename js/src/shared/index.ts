/**
 * Framework-free UI core shared by the JupyterLab panel and the notebook
 * widgets.  Nothing here imports JupyterLab or Lumino, except
 * `restTransport.ts` (exported from the package entry, not from here).
 */
export * from './model';
export * from './format';
export * from './transport';
export * from './jobTable';
export * from './jobDetail';
export * from './lossCurve';
export * from './logView';
export * from './schemaFields';
export * from './schemaForm';
export * from './createJobForm';
export * from './trainingConfigForm';
export * from './curveFollower';
export * from './sweepView';
export * from './tryIt';
export * from './sweepForm';
