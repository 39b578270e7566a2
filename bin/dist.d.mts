export declare const ROOT: string;
export declare const SRC: string;
export declare const DIST: string;
export declare const STAMP: string;
export declare function sourceHash(): string;
export declare function distIsFresh(): boolean;
export declare function nodeArgsFor(srcFile: string): string[];
