//===- FA3KernelOps.td - fa3 Hopper kernel-level operations -*- tablegen -*-===//
//
// Part of the fa3 project: an MLIR-based attention compiler for Hopper.
//
// The Hopper kernel level sits between the tile level and NVVM: the kernel
// builders (convert-fa3-tile-to-hopper, convert-fa3-to-hopper) emit LLVM and
// NVVM ops where MLIR has the instruction, and these ops where it does not
// (wgmma with an A operand in registers and accumulators tied in place;
// named barriers at a chosen id) or where the kernel's structure should stay
// visible (the mbarrier rings of its shared-memory buffers, by use number,
// and the TMA loads that fill them, a tile at a time).
// convert-fa3-kernel-to-nvvm lowers each, one pattern per op: wgmma and
// named barriers to inline PTX, the ring and TMA ops to NVVM's ops.
//
//===----------------------------------------------------------------------===//

#ifndef FA3_DIALECT_FA3_IR_FA3KERNELOPS_TD
#define FA3_DIALECT_FA3_IR_FA3KERNELOPS_TD

include "fa3/Dialect/FA3/IR/FA3Dialect.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/Dialect/LLVMIR/LLVMOpBase.td"

def FA3_WgmmaOp : FA3_Op<"wgmma", [AttrSizedOperandSegments]> {
  let summary = "One warpgroup MMA, m64nNkK, accumulating in place in f32";
  let description = [{
    `wgmma.mma_async.sync.aligned.m64nNkK.f32.T.T` of one warpgroup:
    `accumulators` (N / 2 f32 registers per thread, the m64nN f32 fragment)
    `+= A · B` when `scale_d` is non-zero, `= A · B` when it is zero. B is a
    64-bit shared-memory matrix descriptor; A is either one too
    (`a_descriptor`, SS) or four 32-bit registers of packed elements
    (`a_registers`, RS: two bf16/f16 or four e4m3 each). K is 16 for
    bf16/f16 and 32 for e4m3; `trans_a`/`trans_b` read the shared operands
    MN-major (16-bit only; the RS form's B is always MN-major for 16-bit
    types and K-major for e4m3). The results are the new accumulators: the
    lowering ties each to its input register, so the fragment stays in
    place across a K loop. Asynchronous like the instruction: the caller
    fences and waits (`nvvm.wgmma.*`) around it.

    ```mlir
    %d:32 = fa3.wgmma %acc[...], desc_a %da, desc_b %db, scale_d %one
        {element_type = bf16, trans_a = false, trans_b = true} : ...
    ```
  }];
  let arguments = (ins Variadic<F32>:$accumulators,
                       Variadic<I32>:$a_registers,
                       Optional<I64>:$a_descriptor,
                       I64:$b_descriptor,
                       I32:$scale_d,
                       TypeAttr:$element_type,
                       UnitAttr:$trans_a,
                       UnitAttr:$trans_b);
  let results = (outs Variadic<F32>:$results);
  let assemblyFormat = [{
    `acc` `(` $accumulators `)` (`a` `(` $a_registers^ `)`)?
    (`desc_a` $a_descriptor^)? `desc_b` $b_descriptor `scale_d` $scale_d
    attr-dict `:` type($results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The K of one instruction: 16 for bf16/f16, 32 for e4m3.
    int64_t getK();
    /// The N of the instruction: twice the accumulators per thread.
    int64_t getN() { return 2 * getAccumulators().size(); }
  }];
}

def FA3_NamedBarrierOp : FA3_Op<"named_barrier"> {
  let summary = "bar.sync (or bar.arrive) on a named barrier of the CTA";
  let description = [{
    Synchronizes `threads` threads of the CTA (a multiple of 32) on named
    barrier `id` (0-15, a run-time value so that two warpgroups can take
    turns): `bar.sync`, or with `arrive` `bar.arrive`, which signals without
    waiting. Warp specialization and pingpong order warpgroups with these;
    MLIR's `nvvm.barrier` takes only the aligned, all-threads form.

    ```mlir
    fa3.named_barrier %id {threads = 256 : i64}
    fa3.named_barrier %id {threads = 256 : i64, arrive}
    ```
  }];
  let arguments = (ins I32:$id, I64Attr:$threads, UnitAttr:$arrive);
  let assemblyFormat = "$id attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// mbarrier rings
//===----------------------------------------------------------------------===//

// A ring is `stages` mbarriers, 8 bytes apart from `barriers` in shared
// memory: one per slot of a shared-memory ring buffer (the K or V tiles of
// the key loop, the query tiles of a persistent kernel). The ring's uses are
// numbered from 0 in the order they fill the buffer: use u takes slot
// u mod stages and is the slot barrier's phase u div stages. A buffer has two
// rings, "full" (completed by the fill: TMA bytes or one arrival) and
// "empty" (completed when every consumer thread released the slot).
class FA3_RingOp<string mnemonic, list<Trait> traits = []>
    : FA3_Op<mnemonic, traits> {
  let hasVerifier = 1;
}

def FA3_RingWaitOp : FA3_RingOp<"ring_wait"> {
  let summary = "Waits for a use of an mbarrier ring to complete";
  let description = [{
    Blocks the thread until the phase of use `use` of the ring at
    `barriers` completed: on a ring of "full" barriers, until the slot's
    fill of that use landed. With `previous`, until the phase of the slot's
    previous use (`use - stages`) completed instead: on a ring of "empty"
    barriers, a producer waiting until the consumers released the slot
    before filling it again. The first `stages` uses find their slots free
    and do not wait.

    ```mlir
    fa3.ring_wait %key_full[%use] {stages = 2 : i64}
    fa3.ring_wait %key_empty[%use] {stages = 2 : i64, previous}
    ```
  }];
  let arguments = (ins LLVM_PointerInAddressSpace<3>:$barriers, I32:$use,
                       I64Attr:$stages, UnitAttr:$previous);
  let assemblyFormat = "$barriers `[` $use `]` attr-dict";
}

def FA3_RingArriveOp : FA3_RingOp<"ring_arrive"> {
  let summary = "Arrives on the slot barrier of a use of an mbarrier ring";
  let description = [{
    One arrival of this thread on the barrier of use `use`'s slot: on a
    ring of "empty" barriers, this thread's release of the slot (the
    barrier expects every consumer thread); on a "full" ring without TMA,
    the fill itself.

    ```mlir
    fa3.ring_arrive %key_empty[%use] {stages = 2 : i64}
    ```
  }];
  let arguments = (ins LLVM_PointerInAddressSpace<3>:$barriers, I32:$use,
                       I64Attr:$stages);
  let assemblyFormat = "$barriers `[` $use `]` attr-dict";
}

def FA3_RingBarrierOp : FA3_RingOp<"ring_barrier", [Pure]> {
  let summary = "The slot barrier of a use of an mbarrier ring";
  let description = [{
    The shared-memory address of the barrier of use `use`'s slot, for the
    instructions that name a barrier themselves: `mbarrier.init`, the
    expected byte count of a fill and the TMA loads that complete it.

    ```mlir
    %bar = fa3.ring_barrier %key_full[%use] {stages = 2 : i64}
    ```
  }];
  let arguments = (ins LLVM_PointerInAddressSpace<3>:$barriers, I32:$use,
                       I64Attr:$stages);
  let results = (outs LLVM_PointerInAddressSpace<3>:$barrier);
  let assemblyFormat = "$barriers `[` $use `]` attr-dict";
}

//===----------------------------------------------------------------------===//
// TMA
//===----------------------------------------------------------------------===//

def FA3_TmaLoadTileOp : FA3_Op<"tma_load_tile"> {
  let summary = "TMA load of a [rows, cols] attention tile in 128-byte swizzle atoms";
  let description = [{
    Loads rows `row` .. `row + rows - 1` of head `head` and batch `batch`
    (all `cols` columns) of the `[B, S, H, D]` tensor that `tensor_map` (a
    CUtensorMap with boxes of 128 bytes × `rows` and the 128-byte swizzle)
    describes into shared memory at `smem` + `offset` bytes: one
    `cp.async.bulk.tensor` per atom of 128 bytes of columns, atom a at
    `offset + a · rows · 128`, which is the K-major layout wgmma reads with
    a 128-byte swizzle. Rows past the tensor's end are zero-filled by the
    copy engine. The loads complete on `barrier`, after this thread's
    `mbarrier.arrive.expect_tx` of the tile's bytes. The caller is one
    thread; the barrier expects that one arrival.

    With `packed_heads = G` (PackGQA) the tile's rows are (position, head)
    pairs: `tensor_map` views the tensor as `[B, S, H / G, G, D]` with boxes
    of 128 bytes × G heads × `rows / G` positions, `head` is the group (the
    key/value head) and tile row `r` is head `head · G + r % G` at position
    `row + r / G`: one copy per atom with coordinates (column, 0, `head`,
    `row`, `batch`).

    Rows of 64 bytes (`cols · element_bytes = 64`: e4m3 at D = 64) are one
    atom of the 64-byte swizzle, which the tensor map then uses.

    With `transposed` the tensor map views the tensor as `[B, H, D, S]`
    (positions innermost: the V' that the FP8 forward's layout kernel
    writes) in boxes of 128 bytes of positions × `cols` rows, and the tile
    is stored as the `cols` rows of its `rows` positions: atom a (positions
    `row + a · 128 / element_bytes` on) at `offset + a · cols · 128`, the
    K-major layout of a wgmma B operand whose K runs over the positions.
    Where `rows · element_bytes` is not a multiple of 128 (e4m3 tiles of 64
    or 192 keys) the atoms and boxes are 64 bytes of positions, in the
    64-byte swizzle. With `atom_rows = R` (transposed only; R ≥ `cols`, a
    multiple of 8) atom a starts at `offset + a · R · atom bytes` instead:
    the R − `cols` rows after each atom's are not written (the FP8
    forward keeps rows of e4m3 1.0 there, see `rowSumByMma`).

    ```mlir
    fa3.tma_load_tile %tk[%row, %head, %batch] to %smem[%offset], %bar
        {rows = 128 : i64, cols = 128 : i64, element_bytes = 2 : i64}
    ```
  }];
  let arguments = (ins LLVM_PointerInAddressSpace<0>:$tensor_map, I32:$row,
                       I32:$head, I32:$batch,
                       LLVM_PointerInAddressSpace<3>:$smem, I32:$offset,
                       LLVM_PointerInAddressSpace<3>:$barrier, I64Attr:$rows,
                       I64Attr:$cols, I64Attr:$element_bytes,
                       OptionalAttr<I64Attr>:$packed_heads,
                       UnitAttr:$transposed, OptionalAttr<I64Attr>:$atom_rows);
  let assemblyFormat = [{
    $tensor_map `[` $row `,` $head `,` $batch `]` `to` $smem `[` $offset `]`
    `,` $barrier attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Rows each atom of a transposed tile takes in shared memory.
    int64_t getTransposedAtomRows() {
      return static_cast<int64_t>(getAtomRows().value_or(getCols()));
    }
    /// Bytes of one swizzle atom's row: 128, or 64 for a tile of 64-byte
    /// rows (transposed, of positions: 128, or 64 where the tile's
    /// positions are not whole 128-byte atoms).
    int64_t getAtomBytes() {
      if (getTransposed())
        return transposedAtomBytes(
            static_cast<int64_t>(getRows() * getElementBytes()));
      int64_t rowBytes = static_cast<int64_t>(getCols() * getElementBytes());
      return std::min<int64_t>(128, rowBytes);
    }
    /// Columns (transposed: positions) per swizzle atom.
    int64_t getAtomCols() {
      return getAtomBytes() / static_cast<int64_t>(getElementBytes());
    }
    /// Bytes of the whole tile.
    int64_t getBytes() {
      return static_cast<int64_t>(getRows() * getCols() * getElementBytes());
    }
  }];
}

def FA3_TmaLoadPagedTileOp : FA3_Op<"tma_load_paged_tile"> {
  let summary = "TMA load of a key or value tile of a paged KV cache, in boxes that stay in one page";
  let description = [{
    Loads positions `position` .. `position + rows - 1` of batch `batch`'s
    sequence, head `head`, all `cols` columns, from a paged cache that
    `tensor_map` describes as `[num_pages, page_size, H, D]` (boxes of 128
    bytes × `chunk_rows` rows, the 128-byte swizzle), into shared memory at
    `smem` + `offset` bytes in the layout of `fa3.tma_load_tile` (atom a of
    row r at `offset + a · rows · 128 + r · 128`). Position p is slot
    `p % page_size` of page `page_table[batch · table_width + p /
    page_size]` (`page_table`: the i32 `[B, table_width]` table in global
    memory).

    The tile goes in `rows / chunk_rows` chunks, one `cp.async.bulk.tensor`
    per chunk and atom. `chunk_rows` (a run-time value; the runtime passes
    gcd(page_size, rows)) divides `page_size` and `rows`, so no chunk
    crosses a page. A chunk whose table slot lies past `table_width` reads
    page -1: out of the tensor, which TMA fills with zeros; a page id
    outside `[0, num_pages)` reads zeros too. The loads complete on
    `barrier` after this thread's one `mbarrier.arrive.expect_tx` of the
    whole tile's bytes, as for `fa3.tma_load_tile`.

    ```mlir
    fa3.tma_load_paged_tile %tk[%pos, %head, %b] pages %pt[%width, %page_size, %chunk]
        to %smem[%offset], %bar {rows = 128 : i64, cols = 128 : i64, element_bytes = 2 : i64}
    ```
  }];
  let arguments = (ins LLVM_PointerInAddressSpace<0>:$tensor_map, I32:$position,
                       I32:$head, I32:$batch,
                       LLVM_PointerInAddressSpace<1>:$page_table,
                       I32:$table_width, I32:$page_size, I32:$chunk_rows,
                       LLVM_PointerInAddressSpace<3>:$smem, I32:$offset,
                       LLVM_PointerInAddressSpace<3>:$barrier, I64Attr:$rows,
                       I64Attr:$cols, I64Attr:$element_bytes);
  let assemblyFormat = [{
    $tensor_map `[` $position `,` $head `,` $batch `]` `pages` $page_table `[`
    $table_width `,` $page_size `,` $chunk_rows `]` `to` $smem `[` $offset `]`
    `,` $barrier attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Columns per 128-byte swizzle atom.
    int64_t getAtomCols() {
      return 128 / static_cast<int64_t>(getElementBytes());
    }
    /// Bytes of the whole tile.
    int64_t getBytes() {
      return static_cast<int64_t>(getRows() * getCols() * getElementBytes());
    }
  }];
}

def FA3_TmaStoreTileOp : FA3_Op<"tma_store_tile"> {
  let summary = "TMA store of a [rows, cols] attention tile from 128-byte swizzle atoms";
  let description = [{
    Stores a `rows` x `cols` tile from shared memory to rows `row` ..
    `row + rows - 1` of head `head` and batch `batch` of the `[B, S, H, D]`
    tensor that `tensor_map` describes (boxes of 128 bytes × `rows`, the
    128-byte swizzle): one `cp.async.bulk.tensor` store per 128-byte atom of
    columns, atom a read from `smem` + `offset` + a · `atom_stride` bytes.
    The copy engine drops rows past the tensor's end. The stores join this
    thread's current bulk async-group: the caller commits the group and
    waits for it (`nvvm.cp.async.bulk.commit.group`, `.wait_group.read`)
    before it writes those bytes of shared memory again. `packed_heads`
    reads as in `fa3.tma_load_tile`.

    ```mlir
    fa3.tma_store_tile %to[%row, %head, %batch] from %smem[%offset]
        {rows = 64 : i64, cols = 128 : i64, element_bytes = 2 : i64,
         atom_stride = 16384 : i64}
    ```
  }];
  let arguments = (ins LLVM_PointerInAddressSpace<0>:$tensor_map, I32:$row,
                       I32:$head, I32:$batch,
                       LLVM_PointerInAddressSpace<3>:$smem, I32:$offset,
                       I64Attr:$rows, I64Attr:$cols, I64Attr:$element_bytes,
                       I64Attr:$atom_stride,
                       OptionalAttr<I64Attr>:$packed_heads);
  let assemblyFormat = [{
    $tensor_map `[` $row `,` $head `,` $batch `]` `from` $smem `[` $offset `]`
    attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Columns per 128-byte swizzle atom.
    int64_t getAtomCols() {
      return 128 / static_cast<int64_t>(getElementBytes());
    }
  }];
}

#endif // FA3_DIALECT_FA3_IR_FA3KERNELOPS_TD
