// What machine a run happened on: CPU model, cores, memory; the GPU through nvidia-smi when one is present.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';

export interface GpuInfo {
  name: string;
  driver: string;
  memoryMb: number;
  source: 'nvidia-smi';
}

export interface MachineInfo {
  cpuModel: string;
  /** Logical CPUs the OS reports. */
  logicalCores: number;
  /** Physical cores from /proc/cpuinfo (null where it cannot be read). */
  physicalCores: number | null;
  memoryBytes: number;
  os: string;
  arch: string;
  node: string;
  hostname: string;
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    cpuModel: (cpus[0]?.model ?? 'unknown CPU').trim().replace(/\s+/g, ' '),
    logicalCores: cpus.length || os.availableParallelism(),
    physicalCores: physicalCores(),
    memoryBytes: os.totalmem(),
    os: `${os.type()} ${os.release()}`,
    arch: os.arch(),
    node: process.version,
    hostname: os.hostname(),
  };
}

/** Distinct (physical id, core id) pairs in /proc/cpuinfo. */
export function physicalCores(cpuinfo?: string): number | null {
  let text = cpuinfo;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/cpuinfo', 'utf8');
    } catch {
      return null;
    }
  }
  const cores = new Set<string>();
  for (const block of text.split(/\n\s*\n/)) {
    const phys = /^physical id\s*:\s*(\d+)/m.exec(block)?.[1];
    const core = /^core id\s*:\s*(\d+)/m.exec(block)?.[1];
    if (core !== undefined) cores.add(`${phys ?? '0'}:${core}`);
  }
  return cores.size > 0 ? cores.size : null;
}

/** Parses `nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits`. */
export function parseNvidiaSmi(text: string): GpuInfo[] {
  const gpus: GpuInfo[] = [];
  for (const line of text.split('\n')) {
    const parts = line.split(',').map((s) => s.trim());
    if (parts.length < 3 || !parts[0]) continue;
    const mem = Number(parts[2]);
    if (!Number.isFinite(mem)) continue;
    gpus.push({ name: parts[0], driver: parts[1]!, memoryMb: mem, source: 'nvidia-smi' });
  }
  return gpus;
}

/** GPUs nvidia-smi reports; empty when it is absent or fails (within 5 s). */
export function nvidiaGpus(): GpuInfo[] {
  try {
    const out = execFileSync('nvidia-smi', ['--query-gpu=name,driver_version,memory.total', '--format=csv,noheader,nounits'], {
      encoding: 'utf8',
      timeout: 5000,
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    return parseNvidiaSmi(out);
  } catch {
    return [];
  }
}

/** A point-in-time reading of system-wide CPU time (/proc/stat) and this process's own CPU time. */
export interface CpuSample {
  busyTicks: number;
  totalTicks: number;
  cpus: number;
  processUs: number;
  wallMs: number;
}

/** Parses the aggregate `cpu` line of /proc/stat: [busy, total] ticks (iowait counts as idle, guest is inside user). */
export function parseProcStat(text: string): { busy: number; total: number; cpus: number } | null {
  const m = /^cpu\s+(.+)$/m.exec(text);
  if (!m) return null;
  const v = m[1]!.trim().split(/\s+/).map(Number);
  if (v.length < 4 || v.some((x) => !Number.isFinite(x))) return null;
  const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
  const idle = v[3]! + (v[4] ?? 0);
  const cpus = (text.match(/^cpu\d+\s/gm) ?? []).length;
  return { busy: total - idle, total, cpus };
}

/** A sample taken when this module loaded (the command's start, before any model loads). */
let startSample: CpuSample | null | undefined;
export function startCpuSample(): CpuSample | null {
  return startSample ?? null;
}

export function cpuSample(): CpuSample | null {
  let text: string;
  try {
    text = readFileSync('/proc/stat', 'utf8');
  } catch {
    return null;
  }
  const p = parseProcStat(text);
  if (!p || p.cpus === 0) return null;
  const u = process.cpuUsage();
  return { busyTicks: p.busy, totalTicks: p.total, cpus: p.cpus, processUs: u.user + u.system, wallMs: performance.now() };
}

/** /proc/stat counts 10 ms ticks: a shorter window than this tells nothing. */
export const MIN_CPU_WINDOW_MS = 200;

/**
 * The sample a row's CPU share is measured from: the row's own start when the row lasted
 * MIN_CPU_WINDOW_MS or more, else the latest earlier sample (`earlier`: the starts of the rows before
 * it, oldest first) at least that far back, so a short row is judged with the rows just before it;
 * null when there is none.
 */
export function cpuWindowStart(rowStart: CpuSample | null, earlier: readonly CpuSample[], now: CpuSample | null): CpuSample | null {
  if (!rowStart || !now) return null;
  if (now.wallMs - rowStart.wallMs >= MIN_CPU_WINDOW_MS) return rowStart;
  for (let i = earlier.length - 1; i >= 0; i--) if (now.wallMs - earlier[i]!.wallMs >= MIN_CPU_WINDOW_MS) return earlier[i]!;
  return null;
}

/**
 * The otherCpuShare at or above which a measurement counts as contended: the sweep's row notes "figures
 * may be noisy", and bench compare does not count its moves beyond noise as regressions (nor as a pass).
 */
export const CONTENTION_SHARE = 0.1;

/**
 * Share of the machine's CPU capacity that other processes used between two samples: the system-wide busy
 * fraction minus this process's own CPU time over (wall time x CPUs). Null when it cannot be told.
 */
export function otherCpuShare(a: CpuSample | null, b: CpuSample | null): number | null {
  if (!a || !b) return null;
  const dTotal = b.totalTicks - a.totalTicks;
  const dWall = b.wallMs - a.wallMs;
  if (dTotal <= 0 || dWall < MIN_CPU_WINDOW_MS) return null;
  const busy = (b.busyTicks - a.busyTicks) / dTotal;
  const own = (b.processUs - a.processUs) / 1000 / (dWall * b.cpus);
  return Math.max(0, Math.min(1, busy - own));
}

startSample = cpuSample();
