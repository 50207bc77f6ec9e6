// Package printers turns typed objects into the metav1.Table rows kubectl
// prints, so each resource only declares its columns and cells.
package printers
