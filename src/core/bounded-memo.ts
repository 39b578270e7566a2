/**
 * A function's results by key, started over once `entries` are held: for inputs that mostly repeat (a site's few
 * hundred pages and referrers), at a bounded cost when they do not (an import of millions of distinct URLs).
 * `compute` must be pure, and never return undefined.
 */
export function boundedMemo<T>(entries: number, compute: (key: string) => T): (key: string) => T {
  const memo = new Map<string, T>();
  return (key) => {
    const known = memo.get(key);
    if (known !== undefined) return known;
    const value = compute(key);
    if (memo.size >= entries) memo.clear();
    memo.set(key, value);
    return value;
  };
}
