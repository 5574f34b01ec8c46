// An f32 attention for fa3-run's driver tests (../fa3-run-driver.test).
func.func @attn(%q: tensor<1x17x2x32xf32>, %k: tensor<1x17x2x32xf32>, %v: tensor<1x17x2x32xf32>) -> (tensor<1x17x2x32xf32>, tensor<1x2x17xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<1x17x2x32xf32>, tensor<1x17x2x32xf32>, tensor<1x17x2x32xf32>) -> (tensor<1x17x2x32xf32>, tensor<1x2x17xf32>)
  return %o, %lse : tensor<1x17x2x32xf32>, tensor<1x2x17xf32>
}
