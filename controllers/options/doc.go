// Package options holds the settings of the kruntimes controllers, which
// kruntimes-apiserver takes when it hosts them and kruntimes-controllers
// when it runs them alone, and builds the kruntimes-controllers command:
// its clients, the controller manager and the health and metrics server.
package options
