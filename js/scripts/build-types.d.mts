// Types of build-types.mjs, for test/generatedTypes.test.ts.
export declare const GENERATED_DIR: string;
export declare const TARGETS: readonly { schema: string; module: string }[];
export declare function withoutPropertyTitles(node: unknown, keepTitle?: boolean): unknown;
export declare function generate(schemaFile: string): Promise<string>;
export declare function stale(): Promise<string[]>;
