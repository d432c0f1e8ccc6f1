// Messages between the fuzzer (scripts/fuzz.ts) and its child process (scripts/fuzz-worker.ts).

/** Parent -> child: load one case. */
export interface CaseRequest {
  type: 'case';
  index: number;
  kind: 'checkpoint' | 'gguf';
  /** Checkpoint directory or GGUF file. */
  path: string;
}

export type Outcome = 'loaded' | 'rejected' | 'failure';

/** Child -> parent: how the case ended. */
export interface CaseResult {
  type: 'result';
  index: number;
  outcome: Outcome;
  /** The stage running when the case ended: checkpoint, tokenizer, prompt, engine, request, gguf (or hang / crash). */
  stage: string;
  errorClass?: string;
  message?: string;
  /** Failures: what was wrong. */
  why?: string;
  ms: number;
  rssBytes: number;
}

/** Child -> parent once, when it is ready for cases. */
export interface ReadyMessage {
  type: 'ready';
}
