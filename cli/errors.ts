// CLI failures with their exit codes (docs/operation.md): 1 the operation failed, 2 bad usage,
// 78 bad configuration. Commands throw these; cli/sluice.ts prints the message and exits.

export class UsageError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 2) {
    super(message);
    this.name = 'UsageError';
    this.exitCode = exitCode;
  }
}
