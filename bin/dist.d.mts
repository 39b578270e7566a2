export declare const ROOT: string;
export declare const SRC: string;
export declare const DIST: string;
export declare const STAMP: string;
export declare function sourceHash(): string;
export declare function distIsFresh(): boolean;
export declare function nodeArgsFor(srcFile: string): string[];
/** The environment every launcher gives the service (see dist.mjs). */
export declare const SERVICE_ENV: { MALLOC_MMAP_THRESHOLD_: string };
/** The node flags every launcher gives the service (see dist.mjs). */
export declare const SERVICE_NODE_ARGS: string[];
/** The service's flags, then its entry: how a launcher starts it with node. */
export declare function serviceNodeArgs(): string[];
