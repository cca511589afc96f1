import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'jsdom',
    include: ['test/**/*.test.ts'],
    setupFiles: ['test/setup.ts'],
    // Keep the run light: the machine is shared.
    pool: 'threads',
    poolOptions: { threads: { maxThreads: 2, minThreads: 1 } },
    css: false
  }
});
