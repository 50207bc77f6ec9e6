/**
 * @kruntimes/sdk: kruntimes function and task Runs and sandboxes from
 * TypeScript, authorized by the cluster's RBAC per call, with errors that
 * say whether the handler ran and no re-send after dispatch.
 */
export { Client, type ClientOptions } from './client.js';
export * from './errors.js';
export {
  Function,
  Functions,
  HEADER_DEDUPLICATED,
  HEADER_FUNCTION_ERROR,
  HEADER_INVOCATION_ID,
  MAX_INPUT_BYTES,
  MAX_INVOCATION_ID_BYTES,
  TERMINAL_PHASES,
  parseServerTiming,
  type CreateFunctionOptions,
  type EnvValue,
  type EnvVar,
  type InvokeOptions,
  type InvokeResult,
  type Logs,
  type Retry,
  type RunObject,
  type SecretKeyRef,
  type TimingEntry,
} from './functions.js';
export { Task, Tasks, type LogOptions, type RunTaskOptions, type TaskResult } from './tasks.js';
export {
  CommandHandle,
  Commands,
  Files,
  MAX_FILE_BYTES,
  SANDBOX_HANDLER,
  Sandbox,
  SandboxFileNotFound,
  SandboxPathError,
  SharedRuntime,
  type CommandInfo,
  type CommandResult,
  type CreateSandboxOptions,
  type StartOptions,
  type EntryInfo,
  type EntryList,
  type Downloaded,
  type Extracted,
  type TransferOptions,
  type ListOptions,
  type Execution,
  type ExecutionError,
} from './sandbox.js';
export { type ByteSource } from './streams.js';
export { type ConnectionOptions } from './transport.js';
export { TOOL_LABEL, errorText, kruntimesTool, listTools, outputText, toolName, type KruntimesTool, type ToolOptions } from './adapters/tool.js';
