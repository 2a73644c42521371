/**
 * Search-path scheduling (ContextPilot Algorithm 5): group contexts by the first
 * element of their search path, run longer paths first inside a group and larger
 * groups first. Sorts are stable, so ties keep the tree's depth-first order and
 * sharers stay back to back.
 */
export function scheduleBySearchPath(paths: readonly (readonly number[])[], order: readonly number[]): number[] {
  const groups = new Map<number, number[]>();
  const groupOrder: number[][] = [];
  for (const context of order) {
    const path = paths[context]!;
    const key = path.length > 0 ? path[0]! : -1;
    let group = groups.get(key);
    if (group === undefined) {
      group = [];
      groups.set(key, group);
      groupOrder.push(group);
    }
    group.push(context);
  }
  for (const group of groupOrder) group.sort((a, b) => paths[b]!.length - paths[a]!.length);
  groupOrder.sort((a, b) => b.length - a.length);
  return groupOrder.flat();
}
