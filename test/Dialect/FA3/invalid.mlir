// RUN: fa3-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// fa3.attention: operand shapes
//===----------------------------------------------------------------------===//

func.func @query_rank(%q: tensor<2x128x64xf16>, %k: tensor<2x128x2x64xf16>, %v: tensor<2x128x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects query to have rank 4 [B, Sq, Hq, D], got rank 3}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x128x64xf16>, tensor<2x128x2x64xf16>, tensor<2x128x2x64xf16>) -> (tensor<2x128x2x64xf16>, tensor<2x2x128xf32>)
  return
}

// -----

func.func @key_rank(%q: tensor<2x128x2x64xf16>, %k: tensor<2x128x2x1x64xf16>, %v: tensor<2x128x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects key to have rank 4 [B, Sk, Hkv, D], got rank 5}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x128x2x64xf16>, tensor<2x128x2x1x64xf16>, tensor<2x128x2x64xf16>) -> (tensor<2x128x2x64xf16>, tensor<2x2x128xf32>)
  return
}

// -----

func.func @value_rank(%q: tensor<2x128x2x64xf16>, %k: tensor<2x128x2x64xf16>, %v: tensor<128x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects value to have rank 4 [B, Sk, Hkv, Dv], got rank 3}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x128x2x64xf16>, tensor<2x128x2x64xf16>, tensor<128x2x64xf16>) -> (tensor<2x128x2x64xf16>, tensor<2x2x128xf32>)
  return
}

// -----

func.func @unranked_query(%q: tensor<*xf16>, %k: tensor<2x128x2x64xf16>, %v: tensor<2x128x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects query to be a ranked tensor [B, Sq, Hq, D], got 'tensor<*xf16>'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<*xf16>, tensor<2x128x2x64xf16>, tensor<2x128x2x64xf16>) -> (tensor<2x128x2x64xf16>, tensor<2x2x128xf32>)
  return
}

// -----

func.func @batch_mismatch(%q: tensor<2x128x8x64xf16>, %k: tensor<3x128x2x64xf16>, %v: tensor<3x128x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op batch mismatch: query has 2, key has 3, value has 3}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x128x8x64xf16>, tensor<3x128x2x64xf16>, tensor<3x128x2x64xf16>) -> (tensor<2x128x8x64xf16>, tensor<2x8x128xf32>)
  return
}

// -----

func.func @kv_seq_mismatch(%q: tensor<2x?x8x64xf16>, %k: tensor<2x128x2x64xf16>, %v: tensor<2x96x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op key and value sequence lengths differ: 128 vs 96}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x128x2x64xf16>, tensor<2x96x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @head_dim_mismatch(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x128xf16>, %v: tensor<2x?x2x128xf16>) {
  // expected-error @+1 {{'fa3.attention' op head dim mismatch: query has 64, key has 128}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x128xf16>, tensor<2x?x2x128xf16>) -> (tensor<2x?x8x128xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @gqa_not_divisible(%q: tensor<2x?x6x64xf16>, %k: tensor<2x?x4x64xf16>, %v: tensor<2x?x4x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op query heads (6) must be a positive multiple of key/value heads (4)}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x6x64xf16>, tensor<2x?x4x64xf16>, tensor<2x?x4x64xf16>) -> (tensor<2x?x6x64xf16>, tensor<2x6x?xf32>)
  return
}

// -----

func.func @kv_heads_mismatch(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x4x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op key has 2 heads but value has 4}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x4x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @head_dim_too_large(%q: tensor<1x?x1x512xf16>, %k: tensor<1x?x1x512xf16>, %v: tensor<1x?x1x512xf16>) {
  // expected-error @+1 {{'fa3.attention' op query/key head dim must be a multiple of 8 in [8, 256], got 512}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x1x512xf16>, tensor<1x?x1x512xf16>, tensor<1x?x1x512xf16>) -> (tensor<1x?x1x512xf16>, tensor<1x1x?xf32>)
  return
}

// -----

func.func @head_dim_not_multiple_of_8(%q: tensor<1x?x1x60xf16>, %k: tensor<1x?x1x60xf16>, %v: tensor<1x?x1x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op query/key head dim must be a multiple of 8 in [8, 256], got 60}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x1x60xf16>, tensor<1x?x1x60xf16>, tensor<1x?x1x64xf16>) -> (tensor<1x?x1x64xf16>, tensor<1x1x?xf32>)
  return
}

// -----

func.func @value_head_dim(%q: tensor<1x?x1x64xf16>, %k: tensor<1x?x1x64xf16>, %v: tensor<1x?x1x12xf16>) {
  // expected-error @+1 {{'fa3.attention' op value head dim must be a multiple of 8 in [8, 256], got 12}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x1x64xf16>, tensor<1x?x1x64xf16>, tensor<1x?x1x12xf16>) -> (tensor<1x?x1x12xf16>, tensor<1x1x?xf32>)
  return
}

// -----

func.func @dynamic_head_dim(%q: tensor<2x?x8x?xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects static head count and head dim in query, got shape [2, ?, 8, ?]}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x?xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @dynamic_kv_heads(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x?x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects static head count and head dim in key, got shape [2, ?, ?, 64]}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x?x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

//===----------------------------------------------------------------------===//
// fa3.attention: element types
//===----------------------------------------------------------------------===//

// -----

func.func @dtype_mix(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects query, key and value to share one element type, got 'f16', 'bf16' and 'f16'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @dtype_i8(%q: tensor<2x?x8x64xi8>, %k: tensor<2x?x2x64xi8>, %v: tensor<2x?x2x64xi8>) {
  // expected-error @+1 {{'fa3.attention' op expects element type f32, f16, bf16 or f8E4M3FN, got 'i8'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xi8>, tensor<2x?x2x64xi8>, tensor<2x?x2x64xi8>) -> (tensor<2x?x8x64xi8>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @dtype_f64(%q: tensor<2x?x8x64xf64>, %k: tensor<2x?x2x64xf64>, %v: tensor<2x?x2x64xf64>) {
  // expected-error @+1 {{'fa3.attention' op expects element type f32, f16, bf16 or f8E4M3FN, got 'f64'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf64>, tensor<2x?x2x64xf64>, tensor<2x?x2x64xf64>) -> (tensor<2x?x8x64xf64>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @fp8_without_descales(%q: tensor<2x?x8x128xf8E4M3FN>, %k: tensor<2x?x2x128xf8E4M3FN>, %v: tensor<2x?x2x128xf8E4M3FN>) {
  // expected-error @+1 {{'fa3.attention' op with f8E4M3FN inputs expects 3 descale operands (q_descale, k_descale, v_descale), got 0}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>) -> (tensor<2x?x8x128xbf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @fp8_descale_shape(%q: tensor<2x?x8x128xf8E4M3FN>, %k: tensor<2x?x2x128xf8E4M3FN>, %v: tensor<2x?x2x128xf8E4M3FN>, %d: tensor<2x8xf32>) {
  // expected-error @+1 {{'fa3.attention' op expects q_descale of shape [2, 2] ([B, Hkv]) and element type f32, got 'tensor<2x8xf32>'}}
  %o, %lse = fa3.attention %q, %k, %v, %d, %d, %d : (tensor<2x?x8x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) -> (tensor<2x?x8x128xbf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @fp8_output_type(%q: tensor<2x?x8x128xf8E4M3FN>, %k: tensor<2x?x2x128xf8E4M3FN>, %v: tensor<2x?x2x128xf8E4M3FN>, %d: tensor<2x2xf32>) {
  // expected-error @+1 {{'fa3.attention' op expects output of shape [2, ?, 8, 128] and element type 'bf16', got 'tensor<2x?x8x128xf8E4M3FN>'}}
  %o, %lse = fa3.attention %q, %k, %v, %d, %d, %d : (tensor<2x?x8x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> (tensor<2x?x8x128xf8E4M3FN>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @descales_without_fp8(%q: tensor<2x?x8x128xbf16>, %k: tensor<2x?x2x128xbf16>, %v: tensor<2x?x2x128xbf16>, %d: tensor<2x2xf32>) {
  // expected-error @+1 {{'fa3.attention' op takes descale operands only with f8E4M3FN inputs, got 3}}
  %o, %lse = fa3.attention %q, %k, %v, %d, %d, %d : (tensor<2x?x8x128xbf16>, tensor<2x?x2x128xbf16>, tensor<2x?x2x128xbf16>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> (tensor<2x?x8x128xbf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @fp8_grad(%do: tensor<2x?x8x128xf8E4M3FN>, %q: tensor<2x?x8x128xf8E4M3FN>, %k: tensor<2x?x2x128xf8E4M3FN>, %v: tensor<2x?x2x128xf8E4M3FN>, %o: tensor<2x?x8x128xf8E4M3FN>, %lse: tensor<2x8x?xf32>) {
  // expected-error @+1 {{'fa3.attention_grad' op has no FP8 form: f8E4M3FN inputs are supported by the forward (fa3.attention) only}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse : (tensor<2x?x8x128xf8E4M3FN>, tensor<2x?x8x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x?x8x128xf8E4M3FN>, tensor<2x8x?xf32>) -> (tensor<2x?x8x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>, tensor<2x?x2x128xf8E4M3FN>)
  return
}

//===----------------------------------------------------------------------===//
// fa3.attention: attributes
//===----------------------------------------------------------------------===//

// -----

func.func @window_three_entries(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op window must have 2 entries (left, right), got 3}}
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: 8, 0, 0>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @window_below_minus_one(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op window bounds must be >= -1 (-1 = unbounded), got (-2, 0)}}
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: -2, 0>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @causal_window_right(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op a causal op sees no key to the right of the diagonal; window right bound must be -1 or 0, got 4}}
  %o, %lse = fa3.attention %q, %k, %v {causal, window = array<i64: 128, 4>} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @negative_softcap(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op softcap must be non-negative and finite, got -3.000000e+01}}
  %o, %lse = fa3.attention %q, %k, %v {softcap = -30.0 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @negative_scale(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op scale must be positive and finite, got -1.250000e-01}}
  %o, %lse = fa3.attention %q, %k, %v {scale = -0.125 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @zero_scale(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op scale must be positive and finite, got 0.000000e+00}}
  %o, %lse = fa3.attention %q, %k, %v {scale = 0.0 : f32} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @scale_not_f32(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op attribute 'scale' failed to satisfy constraint: 32-bit float attribute}}
  %o, %lse = fa3.attention %q, %k, %v {scale = 0.125 : f16} : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf32>)
  return
}

//===----------------------------------------------------------------------===//
// fa3.attention: result types
//===----------------------------------------------------------------------===//

// -----

func.func @lse_shape(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects lse of shape [2, 8, ?] and element type 'f32', got 'tensor<2x?x8xf32>'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x?x8xf32>)
  return
}

// -----

func.func @lse_element_type(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects lse of shape [2, 8, ?] and element type 'f32', got 'tensor<2x8x?xf16>'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf16>, tensor<2x8x?xf16>)
  return
}

// -----

func.func @output_shape(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects output of shape [2, ?, 8, 64] and element type 'f16', got 'tensor<2x?x2x64xf16>'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x2x64xf16>, tensor<2x8x?xf32>)
  return
}

// -----

func.func @output_head_dim_is_dv(%q: tensor<1x?x1x64xbf16>, %k: tensor<1x?x1x64xbf16>, %v: tensor<1x?x1x32xbf16>) {
  // expected-error @+1 {{'fa3.attention' op expects output of shape [1, ?, 1, 32] and element type 'bf16', got 'tensor<1x?x1x64xbf16>'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x?x1x64xbf16>, tensor<1x?x1x64xbf16>, tensor<1x?x1x32xbf16>) -> (tensor<1x?x1x64xbf16>, tensor<1x1x?xf32>)
  return
}

// -----

func.func @output_element_type(%q: tensor<2x?x8x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op expects output of shape [2, ?, 8, 64] and element type 'f16', got 'tensor<2x?x8x64xf32>'}}
  %o, %lse = fa3.attention %q, %k, %v : (tensor<2x?x8x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16>) -> (tensor<2x?x8x64xf32>, tensor<2x8x?xf32>)
  return
}

//===----------------------------------------------------------------------===//
// fa3.attention_grad
//===----------------------------------------------------------------------===//

// -----

func.func @grad_lse_shape(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>, %dlse: tensor<2x2x?xf32>) {
  // expected-error @+1 {{'fa3.attention_grad' op expects grad_lse of shape [2, 8, ?] and element type 'f32', got 'tensor<2x2x?xf32>'}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse, %dlse : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>, tensor<2x2x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return
}

// -----

func.func @grad_key_shape(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) {
  // expected-error @+1 {{'fa3.attention_grad' op expects grad_key of shape [2, ?, 2, 64] and element type 'bf16', got 'tensor<2x?x8x64xbf16>'}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>)
  return
}

// -----

func.func @grad_output_shape(%do: tensor<2x?x2x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) {
  // expected-error @+1 {{'fa3.attention_grad' op expects grad_output of shape [2, ?, 8, 64] and element type 'bf16', got 'tensor<2x?x2x64xbf16>'}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse : (tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return
}

// -----

func.func @grad_window(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) {
  // expected-error @+1 {{'fa3.attention_grad' op a causal op sees no key to the right of the diagonal; window right bound must be -1 or 0, got 1}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, window = array<i64: -1, 1>} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return
}

//===----------------------------------------------------------------------===//
// #fa3.schedule
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{block_m and block_n must be multiples of 8, got 60 and 64}}
func.func @schedule_block_m() attributes {s = #fa3.schedule<block_m = 60, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
  return
}

// -----

// expected-error @+1 {{block_m and block_n must be positive, got 64 and 0}}
func.func @schedule_block_n_zero() attributes {s = #fa3.schedule<block_m = 64, block_n = 0, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} {
  return
}

// -----

// expected-error @+1 {{#fa3.persistent_block maps a grid dimension x, y or z, got linear_dim_0}}
func.func @persistent_block_linear() attributes {m = #fa3.persistent_block<linear_dim_0>} {
  return
}

// -----

// expected-error @+1 {{cluster must be 1 or 2, got 3}}
func.func @schedule_cluster() attributes {s = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 3>} {
  return
}

// -----

// expected-error @+1 {{poly_exp2 must be in [0, 16] (every N-th exponential on the FMA pipe, 0 = none), got 17}}
func.func @schedule_poly_exp2() attributes {s = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1, poly_exp2 = 17>} {
  return
}

// -----

// expected-error @+1 {{rescale_threshold must be in [0, 8] (log2 of how far a kept row max may lag), got 9}}
func.func @schedule_rescale_threshold() attributes {s = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1, rescale_threshold = 9>} {
  return
}

// -----

// expected-error @+1 {{pingpong needs at least 2 consumer warpgroups, got 1}}
func.func @schedule_pingpong() attributes {s = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 1, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} {
  return
}

// -----

// expected-error @+1 {{producer_regs and consumer_regs must be 0 or a multiple of 8 in [24, 256], got 16 and 240}}
func.func @schedule_regs() attributes {s = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 16, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} {
  return
}

// -----

// expected-error @+1 {{stages must be at least 1, got 0}}
func.func @schedule_stages() attributes {s = #fa3.schedule<block_m = 128, block_n = 128, stages = 0, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1>} {
  return
}

//===----------------------------------------------------------------------===//
// Tile level
//===----------------------------------------------------------------------===//

// -----

func.func @load_tile_width(%q: tensor<2x?x8x64xf16>, %i: index) {
  // expected-error @+1 {{'fa3.load_tile' op tile has 32 columns but the tensor's head dim is 64}}
  %t = fa3.load_tile %q[%i, %i, %i] : tensor<2x?x8x64xf16> -> tensor<128x32xf16>
  return
}

// -----

func.func @load_tile_element_type(%q: tensor<2x?x8x64xf16>, %i: index) {
  // expected-error @+1 {{'fa3.load_tile' op tile element type 'bf16' differs from the tensor's 'f16'}}
  %t = fa3.load_tile %q[%i, %i, %i] : tensor<2x?x8x64xf16> -> tensor<128x64xbf16>
  return
}

// -----

func.func @load_tile_dynamic(%q: tensor<2x?x8x64xf16>, %i: index) {
  // expected-error @+1 {{'fa3.load_tile' op result #0 must be statically shaped 2-D tensor of f16, bf16, f32 or f8E4M3FN, but got 'tensor<?x64xf16>'}}
  %t = fa3.load_tile %q[%i, %i, %i] : tensor<2x?x8x64xf16> -> tensor<?x64xf16>
  return
}

// -----

func.func @store_tile_width(%t: tensor<128x32xf16>, %o: tensor<2x?x8x64xf16>, %i: index) {
  // expected-error @+1 {{'fa3.store_tile' op tile has 32 columns but the tensor's head dim is 64}}
  %o1 = fa3.store_tile %t into %o[%i, %i, %i] : tensor<128x32xf16> into tensor<2x?x8x64xf16>
  return
}

// -----

func.func @load_stats_type(%lse: tensor<2x8x?xf16>, %i: index) {
  // expected-error @+1 {{'fa3.load_stats' op expects an f32 statistics tensor, got 'tensor<2x8x?xf16>'}}
  %l = fa3.load_stats %lse[%i, %i, %i] : tensor<2x8x?xf16> -> tensor<64xf32>
  return
}

// -----

func.func @block_m_vs_tile_rows(%qt: tensor<64x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>, %i: index) {
  // expected-error @+1 {{'fa3.attention_block' op schedule block_m 128 differs from the query tile's 64 rows}}
  %o, %lse = fa3.attention_block %qt, %k, %v, %i, %i, %i, %i {scale = 1.250000e-01 : f32, schedule = #fa3.schedule<block_m = 128, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : tensor<64x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16> -> tensor<64x64xf16>, tensor<64xf32>
  return
}

// -----

func.func @block_output_tile(%qt: tensor<64x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x32xf16>, %i: index) {
  // expected-error @+1 {{'fa3.attention_block' op expects an output tile of type 'tensor<64x32xf16>', got 'tensor<64x64xf16>'}}
  %o, %lse = fa3.attention_block %qt, %k, %v, %i, %i, %i, %i {scale = 1.250000e-01 : f32, schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : tensor<64x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x32xf16> -> tensor<64x64xf16>, tensor<64xf32>
  return
}

// -----

func.func @fp8_block_without_descales(%qt: tensor<64x64xf8E4M3FN>, %k: tensor<2x?x2x64xf8E4M3FN>, %v: tensor<2x?x2x64xf8E4M3FN>, %i: index) {
  // expected-error @+1 {{'fa3.attention_block' op has e4m3 tiles: it needs descale(%qk, %v)}}
  %o, %lse = fa3.attention_block %qt, %k, %v, %i, %i, %i, %i {probs_scale = 256.0 : f32, scale = 1.250000e-01 : f32, schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : tensor<64x64xf8E4M3FN>, tensor<2x?x2x64xf8E4M3FN>, tensor<2x?x2x64xf8E4M3FN> -> tensor<64x64xbf16>, tensor<64xf32>
  return
}

// -----

func.func @fp8_block_without_probs_scale(%qt: tensor<64x64xf8E4M3FN>, %k: tensor<2x?x2x64xf8E4M3FN>, %v: tensor<2x?x2x64xf8E4M3FN>, %i: index, %d: f32) {
  // expected-error @+1 {{'fa3.attention_block' op has e4m3 tiles: it needs probs_scale (P is rounded to e4m3 before it multiplies V)}}
  %o, %lse = fa3.attention_block %qt, %k, %v, %i, %i, %i, %i descale(%d, %d) {scale = 1.250000e-01 : f32, schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : tensor<64x64xf8E4M3FN>, tensor<2x?x2x64xf8E4M3FN>, tensor<2x?x2x64xf8E4M3FN> -> tensor<64x64xbf16>, tensor<64xf32>
  return
}

// -----

func.func @descales_on_16_bit_block(%qt: tensor<64x64xf16>, %k: tensor<2x?x2x64xf16>, %v: tensor<2x?x2x64xf16>, %i: index, %d: f32) {
  // expected-error @+1 {{'fa3.attention_block' op takes descale(%qk, %v) for e4m3 tiles only, got 'f16'}}
  %o, %lse = fa3.attention_block %qt, %k, %v, %i, %i, %i, %i descale(%d, %d) {scale = 1.250000e-01 : f32, schedule = #fa3.schedule<block_m = 64, block_n = 64, stages = 1, consumer_wgs = 1, producer_regs = 0, consumer_regs = 0, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1>} : tensor<64x64xf16>, tensor<2x?x2x64xf16>, tensor<2x?x2x64xf16> -> tensor<64x64xf16>, tensor<64xf32>
  return
}

// -----

func.func @pv_e4m3_without_probs_scale(%p: tensor<64x64xf32>, %v: tensor<64x64xf8E4M3FN>, %acc: tensor<64x64xf32>) {
  // expected-error @+1 {{'fa3.pv' op an e4m3 value tile needs probs_scale (P is rounded to e4m3 before it multiplies V)}}
  %a = fa3.pv %p, %v, %acc : tensor<64x64xf32>, tensor<64x64xf8E4M3FN>, tensor<64x64xf32>
  return
}

// -----

func.func @qk_inner_dim(%q: tensor<64x64xf16>, %k: tensor<32x128xf16>) {
  // expected-error @+1 {{'fa3.qk' op query tile has 64 columns but key tile has 128}}
  %s = fa3.qk %q, %k : tensor<64x64xf16>, tensor<32x128xf16> -> tensor<64x32xf32>
  return
}

// -----

func.func @qk_scores_shape(%q: tensor<64x64xf16>, %k: tensor<32x64xf16>) {
  // expected-error @+1 {{'fa3.qk' op expects scores of 64x32, got 'tensor<64x64xf32>'}}
  %s = fa3.qk %q, %k : tensor<64x64xf16>, tensor<32x64xf16> -> tensor<64x64xf32>
  return
}

// -----

func.func @qk_scores_f16(%q: tensor<64x64xf16>, %k: tensor<32x64xf16>) {
  // expected-error @+1 {{'fa3.qk' op result #0 must be statically shaped 2-D tensor of f32, but got 'tensor<64x32xf16>'}}
  %s = fa3.qk %q, %k : tensor<64x64xf16>, tensor<32x64xf16> -> tensor<64x32xf16>
  return
}

// -----

func.func @pv_inner_dim(%p: tensor<64x32xf32>, %v: tensor<64x64xf16>, %acc: tensor<64x64xf32>) {
  // expected-error @+1 {{'fa3.pv' op probabilities have 32 columns but the value tile has 64 rows}}
  %a = fa3.pv %p, %v, %acc : tensor<64x32xf32>, tensor<64x64xf16>, tensor<64x64xf32>
  return
}

// -----

func.func @pv_acc_shape(%p: tensor<64x32xf32>, %v: tensor<32x128xf16>, %acc: tensor<64x64xf32>) {
  // expected-error @+1 {{'fa3.pv' op expects an accumulator of 64x128, got 'tensor<64x64xf32>'}}
  %a = fa3.pv %p, %v, %acc : tensor<64x32xf32>, tensor<32x128xf16>, tensor<64x64xf32>
  return
}

// -----

func.func @softcap_zero(%s: tensor<64x64xf32>) {
  // expected-error @+1 {{'fa3.softcap' op softcap must be positive and finite, got 0.000000e+00}}
  %c = fa3.softcap %s {scale = 1.250000e-01 : f32, softcap = 0.0 : f32} : tensor<64x64xf32>
  return
}

// -----

func.func @mask_window(%s: tensor<64x64xf32>, %i: index) {
  // expected-error @+1 {{'fa3.mask' op window must be (left, right) with bounds >= -1}}
  %m = fa3.mask %s, %i, %i, %i, %i {window = array<i64: -5, 0>} : tensor<64x64xf32>
  return
}

// -----

func.func @online_softmax_rows(%s: tensor<64x64xf32>, %m: tensor<32xf32>, %l: tensor<32xf32>) {
  // expected-error @+1 {{'fa3.online_softmax' op scores have 64 rows but the row statistics have 32}}
  %p, %m1, %l1, %a = fa3.online_softmax %s, %m, %l {exp2_scale = 0.18 : f32} : tensor<64x64xf32>, tensor<32xf32>
  return
}

// -----

func.func @online_softmax_threshold(%s: tensor<64x64xf32>, %m: tensor<64xf32>, %l: tensor<64xf32>) {
  // expected-error @+1 {{'fa3.online_softmax' op rescale_threshold must be in [1, 8], got 0}}
  %p, %m1, %l1, %a = fa3.online_softmax %s, %m, %l {exp2_scale = 0.18 : f32, rescale_threshold = 0 : i64} : tensor<64x64xf32>, tensor<64xf32>
  return
}

// -----

func.func @grad_rescale_threshold(%do: tensor<2x?x8x64xbf16>, %q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %v: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %lse: tensor<2x8x?xf32>) {
  // expected-error @+1 {{'fa3.attention_grad' op has rescale_threshold = 8 in its schedule; a backward recomputes P from the LSE and has no online softmax to rescale lazily (must be 0)}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {schedule = #fa3.schedule<block_m = 64, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = false, intra_wg_overlap = false, persistent = false, cluster = 1, rescale_threshold = 8>} : (tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>) -> (tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>)
  return
}

// -----

func.func @rescale_rows(%acc: tensor<64x64xf32>, %c: tensor<128xf32>) {
  // expected-error @+1 {{'fa3.rescale' op accumulator has 64 rows but the correction has 128}}
  %a = fa3.rescale %acc, %c : tensor<64x64xf32>, tensor<128xf32>
  return
}

// -----

func.func @finalize_shape(%acc: tensor<64x64xf32>, %m: tensor<64xf32>, %l: tensor<64xf32>) {
  // expected-error @+1 {{'fa3.finalize' op output tile shape differs from the accumulator's: 'tensor<64x32xf16>' vs 'tensor<64x64xf32>'}}
  %o, %lse = fa3.finalize %acc, %m, %l {scale = 1.0 : f32} : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x32xf16>
  return
}

// -----

// Tiles hold f16, bf16 or f32: the lowerings have no other element type.
func.func @qk_integer_tiles(%q: tensor<32x64xi8>, %k: tensor<16x64xi8>) -> tensor<32x16xf32> {
  // expected-error @+1 {{'fa3.qk' op operand #0 must be statically shaped 2-D tensor of f16, bf16, f32 or f8E4M3FN, but got 'tensor<32x64xi8>'}}
  %s = fa3.qk %q, %k : tensor<32x64xi8>, tensor<16x64xi8> -> tensor<32x16xf32>
  return %s : tensor<32x16xf32>
}

// -----

func.func @finalize_f64_output(%acc: tensor<32x64xf32>, %m: tensor<32xf32>, %l: tensor<32xf32>) -> tensor<32x64xf64> {
  // expected-error @+1 {{'fa3.finalize' op result #0 must be statically shaped 2-D tensor of f16, bf16, f32 or f8E4M3FN, but got 'tensor<32x64xf64>'}}
  %o, %lse = fa3.finalize %acc, %m, %l {scale = 1.0 : f32} : tensor<32x64xf32>, tensor<32xf32> -> tensor<32x64xf64>
  return %o : tensor<32x64xf64>
}

//===----------------------------------------------------------------------===//
// FP8 casting: the fp8 attribute, fa3.hadamard, fa3.quantize
//===----------------------------------------------------------------------===//

// -----

func.func @fp8_attr_needs_bf16(%q: tensor<1x16x2x64xf16>, %k: tensor<1x16x2x64xf16>, %v: tensor<1x16x2x64xf16>) {
  // expected-error @+1 {{'fa3.attention' op with 'fp8' needs bf16 inputs (the FP8 form writes a bf16 output), got 'f16'}}
  %o, %lse = fa3.attention %q, %k, %v {fp8 = #fa3.fp8<hadamard = false>} : (tensor<1x16x2x64xf16>, tensor<1x16x2x64xf16>, tensor<1x16x2x64xf16>) -> (tensor<1x16x2x64xf16>, tensor<1x2x16xf32>)
  return
}

// -----

func.func @fp8_attr_hadamard_power_of_two(%q: tensor<1x16x2x96xbf16>, %k: tensor<1x16x2x96xbf16>, %v: tensor<1x16x2x96xbf16>) {
  // expected-error @+1 {{'fa3.attention' op with 'fp8' and hadamard = true needs a power-of-two head dim, got 96}}
  %o, %lse = fa3.attention %q, %k, %v {fp8 = #fa3.fp8<hadamard = true>} : (tensor<1x16x2x96xbf16>, tensor<1x16x2x96xbf16>, tensor<1x16x2x96xbf16>) -> (tensor<1x16x2x96xbf16>, tensor<1x2x16xf32>)
  return
}

// -----

func.func @fp8_attr_on_fp8(%q: tensor<1x16x2x64xf8E4M3FN>, %k: tensor<1x16x2x64xf8E4M3FN>, %v: tensor<1x16x2x64xf8E4M3FN>, %d: tensor<1x2xf32>) {
  // expected-error @+1 {{'fa3.attention' op has f8E4M3FN inputs already; the 'fp8' attribute asks for bf16 inputs to be quantized}}
  %o, %lse = fa3.attention %q, %k, %v, %d, %d, %d {fp8 = #fa3.fp8<hadamard = false>} : (tensor<1x16x2x64xf8E4M3FN>, tensor<1x16x2x64xf8E4M3FN>, tensor<1x16x2x64xf8E4M3FN>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>) -> (tensor<1x16x2x64xbf16>, tensor<1x2x16xf32>)
  return
}

// -----

func.func @hadamard_not_power_of_two(%x: tensor<4x48xf32>) {
  // expected-error @+1 {{'fa3.hadamard' op transforms the last dimension, which must be a static power of two >= 2, got 48}}
  %y = fa3.hadamard %x {seed = 0 : i64} : tensor<4x48xf32> -> tensor<4x48xf32>
  return
}

// -----

func.func @hadamard_shape(%x: tensor<4x64xf32>) {
  // expected-error @+1 {{'fa3.hadamard' op expects the result shaped like the input [4, 64], got [8, 64]}}
  %y = fa3.hadamard %x {seed = 0 : i64} : tensor<4x64xf32> -> tensor<8x64xf32>
  return
}

// -----

func.func @hadamard_element(%x: tensor<4x64xi8>) {
  // expected-error @+1 {{'fa3.hadamard' op expects f32, f16 or bf16 elements, got 'i8' -> 'f32'}}
  %y = fa3.hadamard %x {seed = 0 : i64} : tensor<4x64xi8> -> tensor<4x64xf32>
  return
}

// -----

func.func @quantize_groups(%x: tensor<2x16x6x64xbf16>) {
  // expected-error @+1 {{'fa3.quantize' op expects the descale as f32 [B, G] with G a static divisor of the 6 heads (batch 2), got 'tensor<2x4xf32>'}}
  %r, %d = fa3.quantize %x : tensor<2x16x6x64xbf16> -> tensor<2x16x6x64xf8E4M3FN>, tensor<2x4xf32>
  return
}

// -----

func.func @quantize_result(%x: tensor<2x16x6x64xbf16>) {
  // expected-error @+1 {{'fa3.quantize' op expects the result as f8E4M3FN [2, 16, 6, 64], got 'tensor<2x16x6x64xbf16>'}}
  %r, %d = fa3.quantize %x : tensor<2x16x6x64xbf16> -> tensor<2x16x6x64xbf16>, tensor<2x3xf32>
  return
}

// -----

func.func @quantize_rank(%x: tensor<16x64xf32>) {
  // expected-error @+1 {{'fa3.quantize' op expects the input as [B, S, H, D], got rank 2}}
  %r, %d = fa3.quantize %x : tensor<16x64xf32> -> tensor<16x64xf8E4M3FN>, tensor<1x1xf32>
  return
}

// -----

func.func @quantize_hadamard_power_of_two(%x: tensor<2x16x6x48xbf16>) {
  // expected-error @+1 {{'fa3.quantize' op with hadamard_seed transforms the head dim, which must be a static power of two >= 2, got 48}}
  %r, %d = fa3.quantize %x {hadamard_seed = 1 : i64} : tensor<2x16x6x48xbf16> -> tensor<2x16x6x48xf8E4M3FN>, tensor<2x3xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// fa3.ring_fill of statistics
//===----------------------------------------------------------------------===//

func.func @ring_fill_stats_2d(%lse: tensor<?x8x?xf32>, %i: index) {
  fa3.warp_specialize producer {
    // expected-error @+1 {{'fa3.ring_fill' op a statistics fill (source 'tensor<?x8x?xf32>') takes a static [rows] f32 tile, got 'tensor<64x8xf32>'}}
    fa3.ring_fill %lse[%i, %i, %i] use %i : tensor<?x8x?xf32> -> tensor<64x8xf32>
    fa3.yield
  } consumers {
    fa3.yield
  } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
  return
}

// -----

//===----------------------------------------------------------------------===//
// fa3.accumulate_tile
//===----------------------------------------------------------------------===//

func.func @accumulate_columns(%t: tensor<64x64xf32>, %acc: memref<?x?x2x128xf32>, %i: index) {
  // expected-error @+1 {{'fa3.accumulate_tile' op tile has 64 columns but the buffer's head dim is 128}}
  fa3.accumulate_tile %t into %acc[%i, %i, %i] : tensor<64x64xf32> into memref<?x?x2x128xf32>
  return
}

// -----

func.func @accumulate_f16(%t: tensor<64x64xf16>, %acc: memref<?x?x2x64xf16>, %i: index) {
  // expected-error @+1 {{operand #0 must be statically shaped 2-D tensor of f32}}
  fa3.accumulate_tile %t into %acc[%i, %i, %i] : tensor<64x64xf16> into memref<?x?x2x64xf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// fa3.parallel_store_tile / fa3.parallel_store_stats
//===----------------------------------------------------------------------===//

func.func @parallel_store_outside_forall(%t: tensor<64x64xf16>, %o: tensor<1x?x2x64xf16>, %i: index) {
  // expected-error @+1 {{'fa3.parallel_store_tile' op must be in the scf.forall.in_parallel region of an scf.forall}}
  fa3.parallel_store_tile %t into %o[%i, %i, %i] : tensor<64x64xf16> into tensor<1x?x2x64xf16>
  return
}

// -----

func.func @parallel_store_not_shared(%t: tensor<64xf32>, %l: tensor<1x2x?xf32>, %other: tensor<1x2x?xf32>) -> tensor<1x2x?xf32> {
  %r = scf.forall (%i) in (4) shared_outs(%s = %l) -> (tensor<1x2x?xf32>) {
    scf.forall.in_parallel {
      // expected-error @+1 {{'fa3.parallel_store_stats' op may only insert into an output block argument}}
      fa3.parallel_store_stats %t into %other[%i, %i, %i] : tensor<64xf32> into tensor<1x2x?xf32>
    }
  }
  return %r : tensor<1x2x?xf32>
}

// -----

func.func @parallel_store_columns(%t: tensor<64x32xf16>, %o: tensor<1x?x2x64xf16>) -> tensor<1x?x2x64xf16> {
  %r = scf.forall (%i) in (4) shared_outs(%s = %o) -> (tensor<1x?x2x64xf16>) {
    scf.forall.in_parallel {
      // expected-error @+1 {{'fa3.parallel_store_tile' op tile has 32 columns but the tensor's head dim is 64}}
      fa3.parallel_store_tile %t into %s[%i, %i, %i] : tensor<64x32xf16> into tensor<1x?x2x64xf16>
    }
  }
  return %r : tensor<1x?x2x64xf16>
}

// -----

func.func @turn_without_mma(%k: tensor<1x?x1x64xbf16>, %row: index) -> tensor<64x64xbf16> {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa3.mma_turn' op holds no fa3.qk or fa3.pv}}
  %t = fa3.mma_turn -> (tensor<64x64xbf16>) {
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    fa3.yield %kt : tensor<64x64xbf16>
  }
  return %t : tensor<64x64xbf16>
}

// -----

func.func @turn_with_softmax(%q: tensor<64x64xbf16>, %kt: tensor<64x64xbf16>, %m: tensor<64xf32>) -> tensor<64x64xf32> {
  %p = fa3.mma_turn -> (tensor<64x64xf32>) {
    %s = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    // expected-error @+1 {{'fa3.online_softmax' op is not an MMA, a tile load or index arithmetic; a pingpong turn holds only those}}
    %p, %m1, %l1, %a = fa3.online_softmax %s, %m, %m {exp2_scale = 1.0 : f32} : tensor<64x64xf32>, tensor<64xf32>
    fa3.yield %p : tensor<64x64xf32>
  }
  return %p : tensor<64x64xf32>
}

// -----

func.func @turn_yield_types(%q: tensor<64x64xbf16>, %kt: tensor<64x64xbf16>) -> tensor<64x32xf32> {
  // expected-error @+1 {{'fa3.mma_turn' op yields 'tensor<64x64xf32>' but returns 'tensor<64x32xf32>'}}
  %s = fa3.mma_turn -> (tensor<64x32xf32>) {
    %s0 = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    fa3.yield %s0 : tensor<64x64xf32>
  }
  return %s : tensor<64x32xf32>
}

// -----

func.func @fill_outside_producer(%k: tensor<1x?x1x64xbf16>, %row: index) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa3.ring_fill' op must be in the producer region of an fa3.warp_specialize}}
  fa3.ring_fill %k[%c0, %row, %c0] use %c0 : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
  return
}

// -----

func.func @fill_tile_shape(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %row: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %s = fa3.warp_specialize -> (tensor<64x64xf32>) producer {
    // expected-error @+1 {{'fa3.ring_fill' op tile 'tensor<64x32xbf16>' must be a static [rows, 64] tensor of 'bf16'}}
    fa3.ring_fill %k[%c0, %row, %c0] use %c0 : tensor<1x?x1x64xbf16> -> tensor<64x32xbf16>
    fa3.yield
  } consumers {
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s0 = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    fa3.yield %s0 : tensor<64x64xf32>
  } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
  return %s : tensor<64x64xf32>
}

// -----

func.func @producer_computes(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %row: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'fa3.warp_specialize' op needs positive producer_regs and consumer_regs, got -8 and 240}}
  %s = fa3.warp_specialize -> (tensor<64x64xf32>) producer {
    fa3.yield
  } consumers {
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s0 = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    fa3.yield %s0 : tensor<64x64xf32>
  } {consumer_regs = 240 : i64, producer_regs = -8 : i64}
  return %s : tensor<64x64xf32>
}

// -----

func.func @producer_mma(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %row: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %s = fa3.warp_specialize -> (tensor<64x64xf32>) producer {
    // expected-error @+1 {{'fa3.load_tile' op is not a ring fill, a loop, a branch or index arithmetic; the producer region holds only those}}
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    fa3.yield
  } consumers {
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s0 = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    fa3.yield %s0 : tensor<64x64xf32>
  } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
  return %s : tensor<64x64xf32>
}

// -----

func.func @fill_paged_query_tile(%q: tensor<1x?x4x64xbf16>, %k: tensor<?x16x1x64xbf16>, %pt: tensor<?x?xi32>, %row: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %s = fa3.warp_specialize -> (tensor<64x64xf32>) producer {
    // expected-error @+1 {{'fa3.ring_fill' op a page table is for key and value fills, which have a 'use'; the query tile is not paged}}
    fa3.ring_fill %q[%c0, %row, %c0] pages %pt : tensor<?x?xi32> : tensor<1x?x4x64xbf16> -> tensor<64x64xbf16>
    fa3.yield
  } consumers {
    %qt = fa3.load_tile %q[%c0, %row, %c0] : tensor<1x?x4x64xbf16> -> tensor<64x64xbf16>
    %kt = fa3.load_paged_tile %k[%pt, %c0, %row, %c0] limit %row : tensor<?x16x1x64xbf16>, tensor<?x?xi32> -> tensor<64x64xbf16>
    %s0 = fa3.qk %qt, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    fa3.yield %s0 : tensor<64x64xf32>
  } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
  return %s : tensor<64x64xf32>
}

// -----

func.func @fill_packed_key_tile(%q: tensor<64x64xbf16>, %k: tensor<1x?x1x64xbf16>, %row: index) -> tensor<64x64xf32> {
  %c0 = arith.constant 0 : index
  %s = fa3.warp_specialize -> (tensor<64x64xf32>) producer {
    // expected-error @+1 {{'fa3.ring_fill' op packed_heads is for the query tile's fill, which has no 'use'}}
    fa3.ring_fill %k[%c0, %row, %c0] use %c0 {packed_heads = 4 : i64} : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    fa3.yield
  } consumers {
    %kt = fa3.load_tile %k[%c0, %row, %c0] : tensor<1x?x1x64xbf16> -> tensor<64x64xbf16>
    %s0 = fa3.qk %q, %kt : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    fa3.yield %s0 : tensor<64x64xf32>
  } {consumer_regs = 240 : i64, producer_regs = 24 : i64}
  return %s : tensor<64x64xf32>
}

// -----

func.func @pack_gqa_fp8(%q: tensor<?x?x8x64xf8E4M3FN>, %k: tensor<?x?x2x64xf8E4M3FN>, %v: tensor<?x?x2x64xf8E4M3FN>, %d: tensor<?x2xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) {
  // expected-error @+1 {{'fa3.attention' op pack_gqa is not implemented for FP8 attentions (f8E4M3FN inputs or the 'fp8' attribute)}}
  %o, %lse = fa3.attention %q, %k, %v, %d, %d, %d {pack_gqa} : (tensor<?x?x8x64xf8E4M3FN>, tensor<?x?x2x64xf8E4M3FN>, tensor<?x?x2x64xf8E4M3FN>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

// -----

func.func @dropout_without_rng(%q: tensor<1x?x2x64xbf16>, %k: tensor<1x?x2x64xbf16>, %v: tensor<1x?x2x64xbf16>) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>) {
  // expected-error @+1 {{'fa3.attention' op with dropout needs an rng operand (the Philox seed and offset, tensor<2xi64>)}}
  %o, %lse = fa3.attention %q, %k, %v {dropout = 0.1 : f32} : (tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>)
  return %o, %lse : tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>
}

// -----

func.func @rng_without_dropout(%q: tensor<1x?x2x64xbf16>, %k: tensor<1x?x2x64xbf16>, %v: tensor<1x?x2x64xbf16>, %rng: tensor<2xi64>) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>) {
  // expected-error @+1 {{'fa3.attention' op takes an rng operand only with a dropout probability}}
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) : (tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<2xi64>) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>)
  return %o, %lse : tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>
}

// -----

func.func @dropout_one(%q: tensor<1x?x2x64xbf16>, %k: tensor<1x?x2x64xbf16>, %v: tensor<1x?x2x64xbf16>, %rng: tensor<2xi64>) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>) {
  // expected-error @+1 {{'fa3.attention' op dropout must be in [0, 1), got 1.000000e+00}}
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {dropout = 1.0 : f32} : (tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<2xi64>) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>)
  return %o, %lse : tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>
}

// -----

func.func @dropout_rng_shape(%q: tensor<1x?x2x64xbf16>, %k: tensor<1x?x2x64xbf16>, %v: tensor<1x?x2x64xbf16>, %rng: tensor<3xi64>) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>) {
  // expected-error @+1 {{'fa3.attention' op expects rng as tensor<2xi64> (the Philox seed and offset), got 'tensor<3xi64>'}}
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {dropout = 0.5 : f32} : (tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<3xi64>) -> (tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>)
  return %o, %lse : tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>
}

// -----

func.func @dropout_pack_gqa(%q: tensor<1x?x8x64xbf16>, %k: tensor<1x?x2x64xbf16>, %v: tensor<1x?x2x64xbf16>, %rng: tensor<2xi64>) -> (tensor<1x?x8x64xbf16>, tensor<1x8x?xf32>) {
  // expected-error @+1 {{'fa3.attention' op dropout is not implemented with pack_gqa (its mask is defined per query head and row)}}
  %o, %lse = fa3.attention %q, %k, %v rng(%rng) {dropout = 0.5 : f32, pack_gqa} : (tensor<1x?x8x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<2xi64>) -> (tensor<1x?x8x64xbf16>, tensor<1x8x?xf32>)
  return %o, %lse : tensor<1x?x8x64xbf16>, tensor<1x8x?xf32>
}

// -----

func.func @grad_dropout_negative(%do: tensor<1x?x2x64xbf16>, %q: tensor<1x?x2x64xbf16>, %k: tensor<1x?x2x64xbf16>, %v: tensor<1x?x2x64xbf16>, %o: tensor<1x?x2x64xbf16>, %lse: tensor<1x2x?xf32>, %rng: tensor<2xi64>) -> (tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>) {
  // expected-error @+1 {{'fa3.attention_grad' op dropout must be in [0, 1), got -5.000000e-01}}
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse rng(%rng) {dropout = -0.5 : f32} : (tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x2x?xf32>, tensor<2xi64>) -> (tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x64xbf16>
}

// -----

func.func @dropout_tile_rng_type(%p: tensor<64x64xf32>, %rng: tensor<2xi32>, %i: index) -> tensor<64x64xf32> {
  // expected-error @+1 {{'fa3.dropout' op operand #1 must be tensor of 64-bit signless integer values, but got 'tensor<2xi32>'}}
  %d = fa3.dropout %p, %rng, %i, %i, %i {p = 0.5 : f32} : tensor<64x64xf32>, tensor<2xi32>
  return %d : tensor<64x64xf32>
}
