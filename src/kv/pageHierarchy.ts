/**
 * CHESS's Page → Chunk → Grid hierarchy of key vectors (paper §3.1).
 *
 * A page vector is the mean of a KV page's keys (without RoPE), flattened over layers and kv
 * heads (eq. 1): `dim = layers * kv_width` floats per page, as the runner returns them. A chunk
 * is `chunkPages` (N_c) consecutive pages and its vector the centroid of their vectors; a grid is
 * `gridChunks` (N_g) consecutive chunks and its vector the centroid of their chunk vectors
 * (eq. 2). The last chunk and grid may be incomplete while decoding fills pages: their vectors
 * are then the centroids of the members they have so far.
 *
 * All node vectors live in one Float32Array (`data`), one row of `dim` floats per node, grouped
 * by level — grid rows from `gridRowStart`, chunk rows from `chunkRowStart`, page rows from
 * `pageRowStart`, each level's rows contiguous — so that `score` computes every node's affinity
 * with an anchor in one pass (Algorithm 1, lines 2–4). Each level has spare rows for growth;
 * when pages outgrow them the buffer is reallocated.
 *
 * `appendPage` updates only the last chunk and grid, recomputing their centroids from their at
 * most N_c pages / N_g chunks (f64 sums, one f32 rounding), so a hierarchy grown page by page is
 * bit-identical to one built from all pages at once.
 */

/** Pages per chunk (N_c) when none is given. */
export const DEFAULT_CHUNK_PAGES = 4;
/** Chunks per grid (N_g) when none is given: a grid is 16 pages, 256 tokens at block size 16. */
export const DEFAULT_GRID_CHUNKS = 4;

export interface PageHierarchyOptions {
  /** N_c, pages per chunk; default DEFAULT_CHUNK_PAGES. */
  chunkPages?: number;
  /** N_g, chunks per grid; default DEFAULT_GRID_CHUNKS. */
  gridChunks?: number;
  /** Pages to make room for up front (more are added as needed). */
  pageCapacity?: number;
}

/** Affinity of every node with one anchor: views into `all`, laid out [grids | chunks | pages]. */
export interface HierarchyScores {
  /** nodeCount scores: gridCount grid scores, then chunkCount chunk scores, then pageCount page scores. */
  readonly all: Float32Array;
  readonly grid: Float32Array;
  readonly chunk: Float32Array;
  readonly page: Float32Array;
}

function checkCount(what: string, value: number, min: number): void {
  if (!Number.isInteger(value) || value < min) throw new RangeError(`PageHierarchy: ${what} must be an integer >= ${min} (got ${value})`);
}

export class PageHierarchy {
  readonly dim: number;
  readonly chunkPages: number;
  readonly gridChunks: number;

  private buffer: Float32Array;
  private pageCap = 0;
  private chunkCap = 0;
  private gridCap = 0;
  private pages = 0;

  constructor(dim: number, options: PageHierarchyOptions = {}) {
    checkCount("dim", dim, 1);
    const { chunkPages = DEFAULT_CHUNK_PAGES, gridChunks = DEFAULT_GRID_CHUNKS, pageCapacity = 64 } = options;
    checkCount("chunkPages", chunkPages, 1);
    checkCount("gridChunks", gridChunks, 1);
    checkCount("pageCapacity", pageCapacity, 0);
    this.dim = dim;
    this.chunkPages = chunkPages;
    this.gridChunks = gridChunks;
    this.buffer = new Float32Array(0);
    this.allocate(Math.max(1, pageCapacity));
  }

  /** A hierarchy of `count` pages whose vectors are the rows of `vectors` (count * dim floats). */
  static fromPages(dim: number, vectors: ArrayLike<number>, count: number, options: PageHierarchyOptions = {}): PageHierarchy {
    checkCount("count", count, 0);
    if (vectors.length !== count * dim) {
      throw new RangeError(`PageHierarchy: ${count} pages of dim ${dim} need ${count * dim} floats (got ${vectors.length})`);
    }
    const hierarchy = new PageHierarchy(dim, { ...options, pageCapacity: Math.max(options.pageCapacity ?? 0, count + 64) });
    hierarchy.appendPages(vectors, count);
    return hierarchy;
  }

  get pageCount(): number {
    return this.pages;
  }

  get chunkCount(): number {
    return Math.ceil(this.pages / this.chunkPages);
  }

  get gridCount(): number {
    return Math.ceil(this.chunkCount / this.gridChunks);
  }

  /** Grids + chunks + pages. */
  get nodeCount(): number {
    return this.gridCount + this.chunkCount + this.pages;
  }

  /** The coalesced node matrix (row r at r * dim); rows past each level's count are spare. */
  get data(): Float32Array {
    return this.buffer;
  }

  get gridRowStart(): number {
    return 0;
  }

  get chunkRowStart(): number {
    return this.gridCap;
  }

  get pageRowStart(): number {
    return this.gridCap + this.chunkCap;
  }

  /** The chunk page i belongs to. */
  chunkOf(page: number): number {
    return Math.floor(page / this.chunkPages);
  }

  /** The grid chunk j belongs to. */
  gridOf(chunk: number): number {
    return Math.floor(chunk / this.gridChunks);
  }

  /** Pages [start, end) of chunk j. */
  pagesOfChunk(chunk: number): [number, number] {
    const start = chunk * this.chunkPages;
    return [start, Math.min(start + this.chunkPages, this.pages)];
  }

  /** Chunks [start, end) of grid k. */
  chunksOfGrid(grid: number): [number, number] {
    const start = grid * this.gridChunks;
    return [start, Math.min(start + this.gridChunks, this.chunkCount)];
  }

  pageVector(page: number): Float32Array {
    this.checkIndex("page", page, this.pages);
    return this.row(this.pageRowStart + page);
  }

  chunkVector(chunk: number): Float32Array {
    this.checkIndex("chunk", chunk, this.chunkCount);
    return this.row(this.chunkRowStart + chunk);
  }

  gridVector(grid: number): Float32Array {
    this.checkIndex("grid", grid, this.gridCount);
    return this.row(this.gridRowStart + grid);
  }

  /** Makes room for `pages` pages in all without reallocating later. */
  reserve(pages: number): void {
    checkCount("pages", pages, 0);
    if (pages > this.pageCap) this.allocate(pages);
  }

  /** Adds the next page (its vector: dim finite floats), updating its chunk's and grid's centroids. */
  appendPage(vector: ArrayLike<number>): void {
    if (vector.length !== this.dim) throw new RangeError(`PageHierarchy: page vector must have ${this.dim} floats (got ${vector.length})`);
    this.appendRows(vector, 0, 1);
  }

  /** Adds `count` pages whose vectors are the rows of `vectors` (count * dim floats). */
  appendPages(vectors: ArrayLike<number>, count: number): void {
    checkCount("count", count, 0);
    if (vectors.length !== count * this.dim) {
      throw new RangeError(`PageHierarchy: ${count} pages need ${count * this.dim} floats (got ${vectors.length})`);
    }
    this.appendRows(vectors, 0, count);
  }

  /**
   * S(u) = anchor · v_u for every node (eq. 4), in one pass over the coalesced matrix. Writes
   * into `out` when given (at least nodeCount floats).
   */
  score(anchor: ArrayLike<number>, out?: Float32Array): HierarchyScores {
    if (anchor.length !== this.dim) throw new RangeError(`PageHierarchy: anchor must have ${this.dim} floats (got ${anchor.length})`);
    const grids = this.gridCount;
    const chunks = this.chunkCount;
    const total = grids + chunks + this.pages;
    if (out !== undefined && out.length < total) throw new RangeError(`PageHierarchy: score output needs ${total} floats (got ${out.length})`);
    const all = out === undefined ? new Float32Array(total) : out.subarray(0, total);
    const a = anchor instanceof Float32Array ? anchor : Float32Array.from(anchor);
    // The three levels' used rows, as (first row, rows, first output) ranges of one matrix.
    const ranges: Array<[number, number, number]> = [
      [this.gridRowStart, grids, 0],
      [this.chunkRowStart, chunks, grids],
      [this.pageRowStart, this.pages, grids + chunks],
    ];
    const m = this.buffer;
    const dim = this.dim;
    const tail = dim & ~3;
    for (const [firstRow, rows, firstOut] of ranges) {
      for (let r = 0; r < rows; r++) {
        const base = (firstRow + r) * dim;
        let s0 = 0;
        let s1 = 0;
        let s2 = 0;
        let s3 = 0;
        let i = 0;
        for (; i < tail; i += 4) {
          s0 += a[i]! * m[base + i]!;
          s1 += a[i + 1]! * m[base + i + 1]!;
          s2 += a[i + 2]! * m[base + i + 2]!;
          s3 += a[i + 3]! * m[base + i + 3]!;
        }
        for (; i < dim; i++) s0 += a[i]! * m[base + i]!;
        all[firstOut + r] = s0 + s1 + (s2 + s3);
      }
    }
    return {
      all,
      grid: all.subarray(0, grids),
      chunk: all.subarray(grids, grids + chunks),
      page: all.subarray(grids + chunks, total),
    };
  }

  private row(row: number): Float32Array {
    return this.buffer.subarray(row * this.dim, (row + 1) * this.dim);
  }

  private checkIndex(what: string, index: number, count: number): void {
    if (!Number.isInteger(index) || index < 0 || index >= count) {
      throw new RangeError(`PageHierarchy: ${what} ${index} out of range (0..${count - 1})`);
    }
  }

  /** (Re)allocates room for `pages` pages, keeping the nodes there are. */
  private allocate(pages: number): void {
    const pageCap = pages;
    const chunkCap = Math.ceil(pageCap / this.chunkPages);
    const gridCap = Math.ceil(chunkCap / this.gridChunks);
    const dim = this.dim;
    const next = new Float32Array((pageCap + chunkCap + gridCap) * dim);
    if (this.pages > 0) {
      const old = this.buffer;
      const copy = (fromRow: number, toRow: number, rows: number) =>
        next.set(old.subarray(fromRow * dim, (fromRow + rows) * dim), toRow * dim);
      copy(this.gridRowStart, 0, this.gridCount);
      copy(this.chunkRowStart, gridCap, this.chunkCount);
      copy(this.pageRowStart, gridCap + chunkCap, this.pages);
    }
    this.buffer = next;
    this.pageCap = pageCap;
    this.chunkCap = chunkCap;
    this.gridCap = gridCap;
  }

  private appendRows(vectors: ArrayLike<number>, from: number, count: number): void {
    if (count === 0) return;
    const dim = this.dim;
    for (let i = from * dim, end = (from + count) * dim; i < end; i++) {
      if (!Number.isFinite(vectors[i]!)) throw new RangeError(`PageHierarchy: page vectors must be finite (float ${i - from * dim} is ${vectors[i]})`);
    }
    if (this.pages + count > this.pageCap) this.allocate(Math.max(this.pages + count, Math.ceil(this.pageCap * 1.5)));
    const firstPage = this.pages;
    const pageBase = this.pageRowStart * dim;
    if (vectors instanceof Float32Array) {
      this.buffer.set(vectors.subarray(from * dim, (from + count) * dim), pageBase + firstPage * dim);
    } else {
      for (let i = 0; i < count * dim; i++) this.buffer[pageBase + firstPage * dim + i] = vectors[from * dim + i]!;
    }
    this.pages += count;
    // Centroids of every chunk and grid the new pages touch.
    const firstChunk = this.chunkOf(firstPage);
    const lastChunk = this.chunkCount - 1;
    for (let c = firstChunk; c <= lastChunk; c++) {
      const [start, end] = this.pagesOfChunk(c);
      this.centroid(this.pageRowStart + start, end - start, this.chunkRowStart + c);
    }
    for (let g = this.gridOf(firstChunk); g <= this.gridOf(lastChunk); g++) {
      const [start, end] = this.chunksOfGrid(g);
      this.centroid(this.chunkRowStart + start, end - start, this.gridRowStart + g);
    }
  }

  /** Row `target` = mean of rows first .. first+rows-1 (f64 sums in row order). */
  private centroid(first: number, rows: number, target: number): void {
    const dim = this.dim;
    const m = this.buffer;
    const base = first * dim;
    const out = target * dim;
    for (let i = 0; i < dim; i++) {
      let sum = 0;
      for (let r = 0; r < rows; r++) sum += m[base + r * dim + i]!;
      m[out + i] = sum / rows;
    }
  }
}
