// Resolves --device: auto picks cuda when this build has the CUDA backend and a GPU, else cpu.
import { loadAddon } from './native.js';
import { cudaAvailable } from './engine.js';
import { UsageError } from '../util/usage-error.js';

export function resolveDevice(requested: 'cpu' | 'cuda' | 'auto'): 'cpu' | 'cuda' {
  if (requested === 'cuda' && !loadAddon().cpuInfo().cudaBuilt) {
    throw new UsageError('--device cuda: this build has no CUDA backend (nvcc was not found when it was built)');
  }
  if (requested === 'cuda' && !cudaAvailable()) {
    throw new UsageError('--device cuda: this build has the CUDA backend but no GPU is visible');
  }
  if (requested === 'auto') return cudaAvailable() ? 'cuda' : 'cpu';
  return requested;
}
