// RUN: fa3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of the inference ops: fa3.attention_varlen,
// fa3.attention_kvcache, fa3.kvcache_append and the tile-level paged forms.

func.func @varlen_query_rank(%q: tensor<1x?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %cq: tensor<?xi32>, %ck: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op expects query to have rank 3 [Tq, Hq, D], got rank 4}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck : (tensor<1x?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<4x?xf32>)
  return
}

// -----

func.func @varlen_offsets_type(%q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %cq: tensor<?xi64>, %ck: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op expects cu_seqlens_q as an i32 tensor [B + 1] [?], got 'tensor<?xi64>'}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck : (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?xi64>, tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<4x?xf32>)
  return
}

// -----

func.func @varlen_offsets_count(%q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %cq: tensor<3xi32>, %ck: tensor<4xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op expects cu_seqlens_k as an i32 tensor [B + 1] (as cu_seqlens_q) [3], got 'tensor<4xi32>'}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck : (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<3xi32>, tensor<4xi32>) -> (tensor<?x4x64xf16>, tensor<4x?xf32>)
  return
}

// -----

func.func @varlen_seqused(%q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %cq: tensor<3xi32>, %ck: tensor<3xi32>, %used: tensor<3xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op expects seqused_k as an i32 tensor [B] (one fewer than cu_seqlens_q) [2], got 'tensor<3xi32>'}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck, %used : (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> (tensor<?x4x64xf16>, tensor<4x?xf32>)
  return
}

// -----

func.func @varlen_tokens(%q: tensor<?x4x64xf16>, %k: tensor<10x2x64xf16>, %v: tensor<12x2x64xf16>, %cq: tensor<?xi32>, %ck: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op key and value sequence lengths differ: 10 vs 12}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck : (tensor<?x4x64xf16>, tensor<10x2x64xf16>, tensor<12x2x64xf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<4x?xf32>)
  return
}

// -----

func.func @varlen_lse_shape(%q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %cq: tensor<?xi32>, %ck: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op expects lse of shape [4, ?] and element type 'f32', got 'tensor<?x4xf32>'}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck : (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<?x4xf32>)
  return
}

// -----

func.func @varlen_fp8(%q: tensor<?x4x64xf8E4M3FN>, %k: tensor<?x2x64xf8E4M3FN>, %v: tensor<?x2x64xf8E4M3FN>, %cq: tensor<?xi32>, %ck: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen' op has no FP8 form}}
  %o, %lse = fa3.attention_varlen %q, %k, %v, %cq, %ck : (tensor<?x4x64xf8E4M3FN>, tensor<?x2x64xf8E4M3FN>, tensor<?x2x64xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xbf16>, tensor<4x?xf32>)
  return
}

// -----

func.func @kvcache_lengths(%q: tensor<4x1x8x64xbf16>, %kc: tensor<4x128x2x64xbf16>, %vc: tensor<4x128x2x64xbf16>, %lens: tensor<3xi32>) {
  // expected-error @+1 {{'fa3.attention_kvcache' op expects cache_seqlens as an i32 tensor [B] [4], got 'tensor<3xi32>'}}
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens : (tensor<4x1x8x64xbf16>, tensor<4x128x2x64xbf16>, tensor<4x128x2x64xbf16>, tensor<3xi32>) -> (tensor<4x1x8x64xbf16>, tensor<4x8x1xf32>)
  return
}

// -----

func.func @kvcache_batch(%q: tensor<4x1x8x64xbf16>, %kc: tensor<3x128x2x64xbf16>, %vc: tensor<3x128x2x64xbf16>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'fa3.attention_kvcache' op batch mismatch: query has 4, key has 3, value has 3}}
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens : (tensor<4x1x8x64xbf16>, tensor<3x128x2x64xbf16>, tensor<3x128x2x64xbf16>, tensor<4xi32>) -> (tensor<4x1x8x64xbf16>, tensor<4x8x1xf32>)
  return
}

// -----

// A paged cache has any number of pages: its first dim is not the batch.
func.func @kvcache_pages(%q: tensor<4x1x8x64xbf16>, %kc: tensor<9x16x2x64xbf16>, %vc: tensor<9x32x2x64xbf16>, %lens: tensor<4xi32>, %pt: tensor<4x8xi32>) {
  // expected-error @+1 {{'fa3.attention_kvcache' op key and value caches differ in pages: key has 9 pages of 16, value has 9 pages of 32}}
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens, %pt : (tensor<4x1x8x64xbf16>, tensor<9x16x2x64xbf16>, tensor<9x32x2x64xbf16>, tensor<4xi32>, tensor<4x8xi32>) -> (tensor<4x1x8x64xbf16>, tensor<4x8x1xf32>)
  return
}

// -----

func.func @kvcache_page_table(%q: tensor<4x1x8x64xbf16>, %kc: tensor<9x16x2x64xbf16>, %vc: tensor<9x16x2x64xbf16>, %lens: tensor<4xi32>, %pt: tensor<2x8xi32>) {
  // expected-error @+1 {{'fa3.attention_kvcache' op expects page_table as an i32 tensor [B, max_pages] [4, ?], got 'tensor<2x8xi32>'}}
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens, %pt : (tensor<4x1x8x64xbf16>, tensor<9x16x2x64xbf16>, tensor<9x16x2x64xbf16>, tensor<4xi32>, tensor<2x8xi32>) -> (tensor<4x1x8x64xbf16>, tensor<4x8x1xf32>)
  return
}

// -----

func.func @append_rows(%kc: tensor<?x128x2x64xbf16>, %vc: tensor<?x128x2x64xbf16>, %k: tensor<?x?x4x64xbf16>, %v: tensor<?x?x2x64xbf16>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.kvcache_append' op expects key rows shaped like the cache's: key is [?, ?, 4, 64], its cache [?, 128, 2, 64]}}
  %a, %b = fa3.kvcache_append %kc, %vc, %k, %v, %lens : (tensor<?x128x2x64xbf16>, tensor<?x128x2x64xbf16>, tensor<?x?x4x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?xi32>) -> (tensor<?x128x2x64xbf16>, tensor<?x128x2x64xbf16>)
  return
}

// -----

func.func @append_dtype(%kc: tensor<?x128x2x64xbf16>, %vc: tensor<?x128x2x64xbf16>, %k: tensor<?x?x2x64xf16>, %v: tensor<?x?x2x64xbf16>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.kvcache_append' op expects key to share key_cache's element type 'bf16', got 'f16'}}
  %a, %b = fa3.kvcache_append %kc, %vc, %k, %v, %lens : (tensor<?x128x2x64xbf16>, tensor<?x128x2x64xbf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xbf16>, tensor<?xi32>) -> (tensor<?x128x2x64xbf16>, tensor<?x128x2x64xbf16>)
  return
}

// -----

func.func @append_result(%kc: tensor<?x128x2x64xbf16>, %vc: tensor<?x128x2x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.kvcache_append' op expects the results typed like the caches, got 'tensor<?x?x2x64xbf16>' and 'tensor<?x128x2x64xbf16>'}}
  %a, %b = fa3.kvcache_append %kc, %vc, %k, %v, %lens : (tensor<?x128x2x64xbf16>, tensor<?x128x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?xi32>) -> (tensor<?x?x2x64xbf16>, tensor<?x128x2x64xbf16>)
  return
}

// -----

func.func @paged_block_needs_length(%qt: tensor<64x64xbf16>, %kc: tensor<?x16x2x64xbf16>, %vc: tensor<?x16x2x64xbf16>, %pt: tensor<?x?xi32>, %i: index) {
  // expected-error @+1 {{'fa3.attention_block' op reads a paged cache: it needs key_len (the cache length) and takes no key_start}}
  %o, %l = fa3.attention_block %qt, %kc, %vc, %i, %i, %i, %i pages %pt {scale = 1.250000e-01 : f32, schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : tensor<64x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?x?xi32> -> tensor<64x64xbf16>, tensor<64xf32>
  return
}

// -----

func.func @paged_tile_columns(%kc: tensor<?x16x2x64xbf16>, %pt: tensor<?x?xi32>, %i: index) {
  // expected-error @+1 {{'fa3.load_paged_tile' op tile has 32 columns but the tensor's head dim is 64}}
  %t = fa3.load_paged_tile %kc[%pt, %i, %i, %i] limit %i : tensor<?x16x2x64xbf16>, tensor<?x?xi32> -> tensor<64x32xbf16>
  return
}

// -----

func.func @paged_tile_table_type(%kc: tensor<?x16x2x64xbf16>, %pt: tensor<?x?xi64>, %i: index) {
  // expected-error @+1 {{'fa3.load_paged_tile' op operand #1 must be 2-D [batch, pages] tensor of i32}}
  %t = fa3.load_paged_tile %kc[%pt, %i, %i, %i] limit %i : tensor<?x16x2x64xbf16>, tensor<?x?xi64> -> tensor<64x64xbf16>
  return
}

// -----

func.func @kvcache_num_splits(%q: tensor<4x1x8x64xbf16>, %kc: tensor<4x128x2x64xbf16>, %vc: tensor<4x128x2x64xbf16>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'fa3.attention_kvcache' op num_splits must be at least 1, got 0}}
  %o, %lse = fa3.attention_kvcache %q, %kc, %vc, %lens {num_splits = 0 : i64} : (tensor<4x1x8x64xbf16>, tensor<4x128x2x64xbf16>, tensor<4x128x2x64xbf16>, tensor<4xi32>) -> (tensor<4x1x8x64xbf16>, tensor<4x8x1xf32>)
  return
}

// -----

func.func @combine_shapes(%p: tensor<4x2x1x8x64xf32>, %l: tensor<4x2x1x8xf32>) {
  // expected-error @+1 {{'fa3.combine_splits' op partial_output [4, 2, 1, 8, 64] ([N, B, Sq, Hq, Dv]) and partial_lse [4, 2, 1, 8] ([N, B, Hq, Sq]) disagree}}
  %o, %lse = fa3.combine_splits %p, %l : (tensor<4x2x1x8x64xf32>, tensor<4x2x1x8xf32>) -> (tensor<2x1x8x64xbf16>, tensor<2x8x1xf32>)
  return
}

// -----

func.func @combine_f32_parts(%p: tensor<4x2x1x8x64xbf16>, %l: tensor<4x2x8x1xf32>) {
  // expected-error @+1 {{'fa3.combine_splits' op expects f32 partial results, got 'bf16' and 'f32'}}
  %o, %lse = fa3.combine_splits %p, %l : (tensor<4x2x1x8x64xbf16>, tensor<4x2x8x1xf32>) -> (tensor<2x1x8x64xbf16>, tensor<2x8x1xf32>)
  return
}

// -----

func.func @combine_output(%p: tensor<4x2x1x8x64xf32>, %l: tensor<4x2x8x1xf32>) {
  // expected-error @+1 {{'fa3.combine_splits' op expects output of shape [2, 1, 8, 64] and element type 'bf16', got 'tensor<2x8x1x64xbf16>'}}
  %o, %lse = fa3.combine_splits %p, %l : (tensor<4x2x1x8x64xf32>, tensor<4x2x8x1xf32>) -> (tensor<2x8x1x64xbf16>, tensor<2x8x1xf32>)
  return
}

// -----

func.func @split_block_output(%qt: tensor<64x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>, %i: index) {
  // expected-error @+1 {{'fa3.attention_block' op expects an output tile of type 'tensor<64x64xf32>', got 'tensor<64x64xbf16>'}}
  %o, %l = fa3.attention_block %qt, %k, %v, %i, %i, %i, %i key_len %i split[%i, %i] {scale = 1.250000e-01 : f32, schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : tensor<64x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16> -> tensor<64x64xbf16>, tensor<64xf32>
  return
}

// -----

func.func @varlen_grad_lse(%do: tensor<?x4x64xf16>, %q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %o: tensor<?x4x64xf16>, %lse: tensor<?x4xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen_grad' op expects lse of shape [4, ?] and element type 'f32', got 'tensor<?x4xf32>'}}
  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk : (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?x4x64xf16>, tensor<?x4xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>)
  return
}

// -----

func.func @varlen_grad_dk(%do: tensor<?x4x64xf16>, %q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %o: tensor<?x4x64xf16>, %lse: tensor<4x?xf32>, %cuq: tensor<?xi32>, %cuk: tensor<?xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen_grad' op expects grad_key of shape [?, 2, 64] and element type 'f16', got 'tensor<?x4x64xf16>'}}
  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk : (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?x4x64xf16>, tensor<4x?xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x2x64xf16>)
  return
}

// -----

func.func @varlen_grad_seqused(%do: tensor<?x4x64xf16>, %q: tensor<?x4x64xf16>, %k: tensor<?x2x64xf16>, %v: tensor<?x2x64xf16>, %o: tensor<?x4x64xf16>, %lse: tensor<4x?xf32>, %cuq: tensor<5xi32>, %cuk: tensor<5xi32>, %used: tensor<5xi32>) {
  // expected-error @+1 {{'fa3.attention_varlen_grad' op expects seqused_k as an i32 tensor [B] (one fewer than cu_seqlens_q) [4], got 'tensor<5xi32>'}}
  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk seqused_k %used : (tensor<?x4x64xf16>, tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>, tensor<?x4x64xf16>, tensor<4x?xf32>, tensor<5xi32>, tensor<5xi32>, tensor<5xi32>) -> (tensor<?x4x64xf16>, tensor<?x2x64xf16>, tensor<?x2x64xf16>)
  return
}
