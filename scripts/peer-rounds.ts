// The arithmetic of bench:peer (scripts/peer-bench.ts) over its round records, apart from the engines
// so that tests can hold it: the order of a round, the limits a round is set against, and the figures
// of a run. Every ratio that is judged (ours over llama.cpp, c=8 over c=1, a decode or prefill
// against its roofline) is taken within each round and the median of those per-round ratios is the
// figure: a median of c=8 over a median of c=1 pairs one round's c=8 with another round's c=1, and
// on this project's hosts the memory's speed moves between rounds (docs/performance.md, "A
// correction: c=8 ÷ c=1 paired by round").
import { median, roundOrder } from './bench-model.js';

/** What one engine measured in one round: prefill tok/s, decode tok/s at c=1 and aggregate at c=8. */
export interface Figures { prefill: number; decode1: number; decode8: number }

/** One round of one weight type: both engines' figures and the limits probed around ours. */
export interface PeerRound {
  ours: Figures;
  llama: Figures;
  /** Sustained read GB/s (the probe's median pass) around our c=1 decode: the higher of the probes before and after it. */
  readGBs: number;
  /** The best single pass of those probes, the higher of the two. */
  readBestGBs: number;
  /** The multiply-add peak in GFLOP/s around our prefill, the higher of before and after; NaN where not probed. */
  peakGflops: number;
}

/** What the bandwidth probe reports: its best pass and its sustained (median) pass, GB/s. */
export interface Bandwidth { readGBs: number; readGBsMedian: number }

/**
 * The limit of a measurement that ran between two probes: the higher of the two, per figure. A
 * single probe sometimes caught a slower moment than the measurement saw, and put it above its roofline.
 */
export function higherLimit(before: Bandwidth, after: Bandwidth): Bandwidth {
  return { readGBs: Math.max(before.readGBs, after.readGBs), readGBsMedian: Math.max(before.readGBsMedian, after.readGBsMedian) };
}

/** Prefill tok/s of a prompt of `tokens` tokens: from its enqueue to its first token (ms). */
export function prefillRate(tokens: number, enqueueMs: number, firstTokenMs: number): number {
  return tokens / ((firstTokenMs - enqueueMs) / 1000);
}

/** One slot of a round: which type, on which engine. */
export interface Slot<T> { type: T; engine: 'ours' | 'llama' }

/**
 * The order of round r: the types rotated by r (as bench:batch rotates its builds), and within each
 * type ours first or llama.cpp first, the two alternating every `types.length` rounds. Over
 * 2 x types.length rounds every (type, engine) takes every slot once, so neither an engine nor a type
 * keeps the place a fixed order gave it (a measurement's place in the sequence moved its figure:
 * docs/performance.md, "How to measure").
 */
export function peerRoundOrder<T>(types: readonly T[], r: number): Slot<T>[] {
  const oursFirst = Math.floor(r / types.length) % 2 === 0;
  const engines: Array<Slot<T>['engine']> = oursFirst ? ['ours', 'llama'] : ['llama', 'ours'];
  return roundOrder(types, r).flatMap((type) => engines.map((engine) => ({ type, engine })));
}

/** Fewer rounds than this whose fraction is a measurement, and a fraction is not judged. */
export const MIN_JUDGED_ROUNDS = 2;

/** Per-round fractions of a limit, and the median that is judged. */
export interface FractionSet {
  /** Each round's fraction, in round order. */
  rounds: number[];
  /**
   * The rounds (numbered from 1) left out of the median: above 100 % of the limit their probes gave,
   * so the limit moved within the round and the fraction is not a measurement.
   */
  leftOut: number[];
  /** How many rounds the median is over. */
  valid: number;
  /** Whether at least MIN_JUDGED_ROUNDS rounds are left to judge. */
  judged: boolean;
  /** The median over the rounds not left out; NaN when not judged. */
  median: number;
}

/** The judged median of per-round fractions: the rounds above 1 left out, at least MIN_JUDGED_ROUNDS kept. */
export function judgedFractions(rounds: readonly number[]): FractionSet {
  const leftOut: number[] = [];
  const kept: number[] = [];
  rounds.forEach((f, i) => {
    if (f > 1) leftOut.push(i + 1);
    else if (Number.isFinite(f)) kept.push(f);
  });
  const judged = kept.length >= MIN_JUDGED_ROUNDS;
  return { rounds: [...rounds], leftOut, valid: kept.length, judged, median: judged ? median(kept) : NaN };
}

/** Our c=8 over our c=1 (and llama.cpp's), each round against itself, and the medians of those. */
export interface C8OverC1 {
  ours: number;
  llama: number;
  rounds: { ours: number[]; llama: number[] };
}

/** A weight type's figures over its rounds. */
export interface PeerSummary {
  /** Medians over the rounds, per engine and figure. */
  ours: Figures;
  llama: Figures;
  /**
   * Ours over llama.cpp: the median over the rounds of each round's own ratio (the two engines ran one
   * after the other in the round, in the same memory phase).
   */
  ratios: Figures;
  /** Each round's ours over llama.cpp, in round order. */
  ratioRounds: { prefill: number[]; decode1: number[]; decode8: number[] };
  c8OverC1: C8OverC1;
  /** The median of the rounds' sustained read bandwidth, and the decode roofline (tok/s) at it, for the header. */
  readGBs: number;
  decodeRoof: number;
  /** Our c=1 decode against the roofline at each round's sustained read, and at its best pass. */
  decode: FractionSet;
  decodeBest: FractionSet;
  /** Float weights: our prefill's FLOP rate against the peak probed around it, per round; null for block-quantized ones. */
  prefill: FractionSet | null;
  /** The peak the printed prefill roofline is at: the median of the rounds' peaks (float weights). */
  prefillPeak: number;
}

const ratiosOf = (rounds: readonly Figures[]) => rounds.map((f) => f.decode8 / f.decode1);

/**
 * The figures of one weight type from its rounds. `stepBytes`: what a decode step reads;
 * `prefillFlops`: what a prompt token costs; `blockQuant`: block-quantized weights, whose prefill
 * is set against llama.cpp instead of the probed peak.
 */
export function summarizeRounds(rounds: readonly PeerRound[], stepBytes: number, prefillFlops: number, blockQuant: boolean): PeerSummary {
  if (rounds.length === 0) throw new Error('summarizeRounds: no rounds');
  const medians = (pick: (r: PeerRound) => Figures): Figures => ({
    prefill: median(rounds.map((r) => pick(r).prefill)),
    decode1: median(rounds.map((r) => pick(r).decode1)),
    decode8: median(rounds.map((r) => pick(r).decode8)),
  });
  const ours = medians((r) => r.ours);
  const llama = medians((r) => r.llama);
  const paired = (k: keyof Figures) => rounds.map((r) => r.ours[k] / r.llama[k]);
  const ratioRounds = { prefill: paired('prefill'), decode1: paired('decode1'), decode8: paired('decode8') };
  const oursRatios = ratiosOf(rounds.map((r) => r.ours));
  const llamaRatios = ratiosOf(rounds.map((r) => r.llama));
  const readGBs = median(rounds.map((r) => r.readGBs));
  const roof = (gbs: number) => (gbs * 1e9) / stepBytes;
  const prefillPeak = median(rounds.map((r) => r.peakGflops));
  return {
    ours,
    llama,
    ratios: { prefill: median(ratioRounds.prefill), decode1: median(ratioRounds.decode1), decode8: median(ratioRounds.decode8) },
    ratioRounds,
    c8OverC1: { ours: median(oursRatios), llama: median(llamaRatios), rounds: { ours: oursRatios, llama: llamaRatios } },
    readGBs,
    decodeRoof: roof(readGBs),
    decode: judgedFractions(rounds.map((r) => r.ours.decode1 / roof(r.readGBs))),
    decodeBest: judgedFractions(rounds.map((r) => r.ours.decode1 / roof(r.readBestGBs))),
    prefill: blockQuant ? null : judgedFractions(rounds.map((r) => (r.ours.prefill * prefillFlops) / 1e9 / r.peakGflops)),
    prefillPeak,
  };
}
