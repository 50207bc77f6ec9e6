// Package retry is the one retry engine of kruntimes: given a Run's
// retryPolicy, its attempt and why it failed, it decides whether to try
// again and after how long. runtimed and the recovery controller both use it,
// so a Run is retried the same way whoever noticed the failure.
package retry
