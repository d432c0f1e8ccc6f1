// The tensors of a Qwen3.5 text model, one row per role: the Hugging Face name, the llama.cpp
// (GGUF) name, the shape from the config, and the convention that turns the stored values into
// the ones the forward pass uses. The one table that the checkpoint loader (which tensors must be
// there, with which shapes), the native binding (which role each tensor fills, and how its
// values are folded) and the GGUF converter all read. docs/architecture.md: "where to find".
import type { LayerType, TextConfig } from './types.js';

/**
 * Where a role appears: once per model, in every layer, in layers of one type, or in the MTP
 * head (whose single layer is a full-attention layer under `mtp.layers.0.`).
 */
export type RoleScope = 'model' | 'layer' | LayerType | 'mtp';

/**
 * How stored values become the forward pass's values (the engine folds them at load; llama.cpp's
 * GGUF stores them folded): zero-centred norms are used as (1 + w); A_log becomes -exp(A_log).
 */
export type RoleFold = 'plus_one' | 'neg_exp';

/**
 * Value-head re-tiling for GGUF (llama.cpp orders the DeltaNet value heads of a key head group
 * side by side, the checkpoint orders them per key head): which axis of the tensor it permutes.
 */
export type ValueHeadTiling = 'qkv_rows' | 'value_rows' | 'head_rows' | 'value_cols';

export interface TensorRole {
  /** The id the native binding knows (native/checkpoint/weights.cpp). */
  role: string;
  scope: RoleScope;
  /** Hugging Face name: under `layers.N.` for layer scopes, under the model prefix otherwise. */
  hf: string;
  /** GGUF name: under `blk.N.` for layer scopes. */
  gguf: string;
  /** matrix: [out, in]; vector: 1-D (norms, biases, gates); conv: the depthwise conv [conv_dim, 1, K]. */
  kind: 'matrix' | 'vector' | 'conv';
  shape: (c: TextConfig) => number[];
  fold?: RoleFold;
  tiling?: ValueHeadTiling;
}

const H = (c: TextConfig) => c.hiddenSize;
const keyDim = (c: TextConfig) => c.linearNumKeyHeads * c.linearKeyHeadDim;
const valueDim = (c: TextConfig) => c.linearNumValueHeads * c.linearValueHeadDim;
const convDim = (c: TextConfig) => 2 * keyDim(c) + valueDim(c);

export const TENSOR_ROLES: readonly TensorRole[] = [
  { role: 'embed', scope: 'model', hf: 'embed_tokens.weight', gguf: 'token_embd.weight', kind: 'matrix', shape: (c) => [c.vocabSize, H(c)] },
  { role: 'final_norm', scope: 'model', hf: 'norm.weight', gguf: 'output_norm.weight', kind: 'vector', shape: (c) => [H(c)], fold: 'plus_one' },
  // The untied head; a tied model uses the embedding.
  { role: 'lm_head', scope: 'model', hf: 'lm_head.weight', gguf: 'output.weight', kind: 'matrix', shape: (c) => [c.vocabSize, H(c)] },

  { role: 'in_norm', scope: 'layer', hf: 'input_layernorm.weight', gguf: 'attn_norm.weight', kind: 'vector', shape: (c) => [H(c)], fold: 'plus_one' },
  { role: 'post_norm', scope: 'layer', hf: 'post_attention_layernorm.weight', gguf: 'post_attention_norm.weight', kind: 'vector', shape: (c) => [H(c)], fold: 'plus_one' },
  { role: 'mlp_gate', scope: 'layer', hf: 'mlp.gate_proj.weight', gguf: 'ffn_gate.weight', kind: 'matrix', shape: (c) => [c.intermediateSize, H(c)] },
  { role: 'mlp_up', scope: 'layer', hf: 'mlp.up_proj.weight', gguf: 'ffn_up.weight', kind: 'matrix', shape: (c) => [c.intermediateSize, H(c)] },
  { role: 'mlp_down', scope: 'layer', hf: 'mlp.down_proj.weight', gguf: 'ffn_down.weight', kind: 'matrix', shape: (c) => [H(c), c.intermediateSize] },

  // Query rows interleave query and gate per head.
  { role: 'attn_q', scope: 'full_attention', hf: 'self_attn.q_proj.weight', gguf: 'attn_q.weight', kind: 'matrix', shape: (c) => [2 * c.numHeads * c.headDim, H(c)] },
  { role: 'attn_k', scope: 'full_attention', hf: 'self_attn.k_proj.weight', gguf: 'attn_k.weight', kind: 'matrix', shape: (c) => [c.numKvHeads * c.headDim, H(c)] },
  { role: 'attn_v', scope: 'full_attention', hf: 'self_attn.v_proj.weight', gguf: 'attn_v.weight', kind: 'matrix', shape: (c) => [c.numKvHeads * c.headDim, H(c)] },
  { role: 'attn_o', scope: 'full_attention', hf: 'self_attn.o_proj.weight', gguf: 'attn_output.weight', kind: 'matrix', shape: (c) => [H(c), c.numHeads * c.headDim] },
  { role: 'attn_q_norm', scope: 'full_attention', hf: 'self_attn.q_norm.weight', gguf: 'attn_q_norm.weight', kind: 'vector', shape: (c) => [c.headDim], fold: 'plus_one' },
  { role: 'attn_k_norm', scope: 'full_attention', hf: 'self_attn.k_norm.weight', gguf: 'attn_k_norm.weight', kind: 'vector', shape: (c) => [c.headDim], fold: 'plus_one' },

  { role: 'gdn_qkv', scope: 'linear_attention', hf: 'linear_attn.in_proj_qkv.weight', gguf: 'attn_qkv.weight', kind: 'matrix', shape: (c) => [convDim(c), H(c)], tiling: 'qkv_rows' },
  { role: 'gdn_z', scope: 'linear_attention', hf: 'linear_attn.in_proj_z.weight', gguf: 'attn_gate.weight', kind: 'matrix', shape: (c) => [valueDim(c), H(c)], tiling: 'value_rows' },
  { role: 'gdn_b', scope: 'linear_attention', hf: 'linear_attn.in_proj_b.weight', gguf: 'ssm_beta.weight', kind: 'matrix', shape: (c) => [c.linearNumValueHeads, H(c)], tiling: 'head_rows' },
  { role: 'gdn_a', scope: 'linear_attention', hf: 'linear_attn.in_proj_a.weight', gguf: 'ssm_alpha.weight', kind: 'matrix', shape: (c) => [c.linearNumValueHeads, H(c)], tiling: 'head_rows' },
  { role: 'gdn_conv', scope: 'linear_attention', hf: 'linear_attn.conv1d.weight', gguf: 'ssm_conv1d.weight', kind: 'conv', shape: (c) => [convDim(c), 1, c.linearConvKernelDim], tiling: 'qkv_rows' },
  { role: 'gdn_dt_bias', scope: 'linear_attention', hf: 'linear_attn.dt_bias', gguf: 'ssm_dt.bias', kind: 'vector', shape: (c) => [c.linearNumValueHeads], tiling: 'head_rows' },
  { role: 'gdn_a_log', scope: 'linear_attention', hf: 'linear_attn.A_log', gguf: 'ssm_a', kind: 'vector', shape: (c) => [c.linearNumValueHeads], fold: 'neg_exp', tiling: 'head_rows' },
  // The gated RMSNorm's weight is a plain multiplier (not zero-centred).
  { role: 'gdn_norm', scope: 'linear_attention', hf: 'linear_attn.norm.weight', gguf: 'ssm_norm.weight', kind: 'vector', shape: (c) => [c.linearValueHeadDim] },
  { role: 'gdn_out', scope: 'linear_attention', hf: 'linear_attn.out_proj.weight', gguf: 'ssm_out.weight', kind: 'matrix', shape: (c) => [H(c), valueDim(c)], tiling: 'value_cols' },

  // The MTP head (GGUF: under blk.<numLayers>.nextn.; its layer is blk.<numLayers>).
  { role: 'mtp_fc', scope: 'mtp', hf: 'mtp.fc.weight', gguf: 'eh_proj.weight', kind: 'matrix', shape: (c) => [H(c), 2 * H(c)] },
  { role: 'mtp_norm_embedding', scope: 'mtp', hf: 'mtp.pre_fc_norm_embedding.weight', gguf: 'enorm.weight', kind: 'vector', shape: (c) => [H(c)], fold: 'plus_one' },
  { role: 'mtp_norm_hidden', scope: 'mtp', hf: 'mtp.pre_fc_norm_hidden.weight', gguf: 'hnorm.weight', kind: 'vector', shape: (c) => [H(c)], fold: 'plus_one' },
  { role: 'mtp_norm', scope: 'mtp', hf: 'mtp.norm.weight', gguf: 'shared_head_norm.weight', kind: 'vector', shape: (c) => [H(c)], fold: 'plus_one' },
];

export const LM_HEAD_ROLE = TENSOR_ROLES.find((r) => r.role === 'lm_head')!;

/** The roles of one decoder layer of the given type, in table order. */
export function layerRoles(type: LayerType): TensorRole[] {
  return TENSOR_ROLES.filter((r) => r.scope === 'layer' || r.scope === type);
}

/** The role of a model-scope tensor, by role id. */
export function modelRole(role: 'embed' | 'final_norm' | 'lm_head'): TensorRole {
  return TENSOR_ROLES.find((r) => r.scope === 'model' && r.role === role)!;
}

/** The MTP head's own tensors (not its layer). */
export function mtpRoles(): TensorRole[] {
  return TENSOR_ROLES.filter((r) => r.scope === 'mtp');
}
