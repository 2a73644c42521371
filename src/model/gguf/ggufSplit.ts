/**
 * A GGUF model split in parts, as llama.cpp's gguf-split and gguf-py write it: files named
 * PREFIX-00001-of-0000N.gguf .. PREFIX-0000N-of-0000N.gguf, each with split.no (0-based),
 * split.count and split.tensors.count; the first part holds the metadata, every part some of the
 * tensors. The runner maps the parts itself (cuda/src/gguf_split.cpp, the same checks); this side
 * reads the parts' headers for what it needs before the runner starts (the tensor list, the
 * files a model is made of).
 */
import { existsSync, statSync } from "node:fs";
import { GgufError, type GgufMetadata, metadataNumber } from "./ggufMetadata.ts";
import { type GgufHeader, type GgufTensorInfo, readGgufFile } from "./ggufReader.ts";

/** A split part's file name: its 1-based number and the count of parts. */
export const SPLIT_PART_NAME = /-(\d{5})-of-(\d{5})\.gguf$/i;

export interface GgufSplit {
  /** 0-based. */
  no: number;
  count: number;
  tensors: number;
}

/** The file's split keys; null for a model of one file (no split.count). */
export function ggufSplitOf(metadata: GgufMetadata): GgufSplit | null {
  if (!metadata.has("split.count")) return null;
  const count = metadataNumber(metadata, "split.count");
  return {
    no: metadata.has("split.no") ? metadataNumber(metadata, "split.no") : 0,
    count,
    tensors: metadata.has("split.tensors.count") ? metadataNumber(metadata, "split.tensors.count") : -1,
  };
}

const partTail = (no: number, count: number): string => `-${String(no).padStart(5, "0")}-of-${String(count).padStart(5, "0")}.gguf`;

/** The parts' paths of a split of `count` parts whose first part is `first` (pure). */
export function ggufSplitPartPaths(first: string, count: number): string[] {
  const tail = partTail(1, count);
  if (!first.endsWith(tail) || first.length === tail.length) {
    throw new GgufError(`${first}: its split.count says the model is split in ${count} parts, but the file is not named as the first of them (PREFIX${tail}, llama.cpp's names for the parts)`);
  }
  const prefix = first.slice(0, -tail.length);
  return Array.from({ length: count }, (_, i) => `${prefix}${partTail(i + 1, count)}`);
}

export interface GgufPart {
  path: string;
  header: GgufHeader;
}

/**
 * The headers of the model whose file (or first part) is `path`: one entry for a model of one
 * file, every part in order for a split one. GgufErrors name a missing part, a later part given
 * first, a part of another split or model, and counts that disagree.
 */
export function readGgufParts(path: string): GgufPart[] {
  const header = readGgufFile(path);
  const split = ggufSplitOf(header.metadata);
  if (split === null || split.count === 1) return [{ path, header }];
  const { count } = split;
  if (!Number.isSafeInteger(count) || count < 1 || count > 99_999) throw new GgufError(`${path}: split.count ${count} is not a number of parts (1..99999)`);
  if (split.no !== 0) {
    const tail = partTail(split.no + 1, count);
    const first = path.endsWith(tail) ? `, ${path.slice(0, -tail.length)}${partTail(1, count)}` : "";
    throw new GgufError(`${path}: this is part ${split.no + 1} of ${count} of a split model; give --model its first part${first}`);
  }
  if (split.tensors < 0) throw new GgufError(`${path}: the first part of a split has no split.tensors.count`);
  const parts: GgufPart[] = [{ path, header }];
  const architecture = header.metadata.get("general.architecture")?.value;
  for (const [index, partPath] of ggufSplitPartPaths(path, count).entries()) {
    if (index === 0) continue;
    if (!existsSync(partPath) || !statSync(partPath).isFile()) throw new GgufError(`${path}: part ${index + 1} of ${count} of this split model is missing: ${partPath}`);
    const part = readGgufFile(partPath);
    const own = ggufSplitOf(part.metadata);
    const seen = own === null ? "none" : `${own.no} / ${own.count} / ${own.tensors}`;
    if (own === null || own.no !== index || own.count !== count || own.tensors !== split.tensors) {
      throw new GgufError(
        `${partPath}: not part ${index + 1} of ${path}'s split: its split.no / split.count / split.tensors.count are ${seen}, expected ${index} / ${count} / ${split.tensors} (a part of another model or split?)`,
      );
    }
    const partArchitecture = part.metadata.get("general.architecture")?.value;
    if (architecture !== undefined && partArchitecture !== undefined && partArchitecture !== architecture) {
      throw new GgufError(`${partPath}: a part of a ${String(partArchitecture)} model, but the first part ${path} is ${String(architecture)}`);
    }
    parts.push({ path: partPath, header: part });
  }
  const names = new Set<string>();
  for (const part of parts) {
    for (const tensor of part.header.tensors) {
      if (names.has(tensor.name)) throw new GgufError(`${part.path}: tensor ${tensor.name} is in two parts of the split model ${path}`);
      names.add(tensor.name);
    }
  }
  if (names.size !== split.tensors) throw new GgufError(`${path}: the ${count} parts hold ${names.size} tensors, but split.tensors.count says ${split.tensors}`);
  return parts;
}

/** Every tensor of the model, from all its parts. */
export function ggufModelTensors(parts: readonly GgufPart[]): GgufTensorInfo[] {
  return parts.flatMap((part) => part.header.tensors);
}
