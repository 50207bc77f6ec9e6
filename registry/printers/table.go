package printers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apiserver/pkg/registry/rest"
)

// TableConvertor prints objects of type T with the given columns; Name comes
// first and Age last, as for built-in kinds.
type TableConvertor[T runtime.Object] struct {
	// Columns are the columns between Name and Age.
	Columns []metav1.TableColumnDefinition
	// Cells returns one cell per column of Columns.
	Cells func(obj T) []any
}

var _ rest.TableConvertor = TableConvertor[runtime.Object]{}

var (
	nameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name of the object."}
	ageColumn  = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "Time since the object was created."}
)

// ConvertToTable implements rest.TableConvertor.
func (c TableConvertor[T]) ConvertToTable(_ context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	addRow := func(obj runtime.Object) error {
		typed, ok := obj.(T)
		if !ok {
			return fmt.Errorf("cannot print %T in this table", obj)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		cells := append([]any{m.GetName()}, c.Cells(typed)...)
		cells = append(cells, age(m.GetCreationTimestamp()))
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}})
		return nil
	}
	if meta.IsListType(object) {
		if err := meta.EachListItem(object, addRow); err != nil {
			return nil, err
		}
	} else if err := addRow(object); err != nil {
		return nil, err
	}
	if l, err := meta.ListAccessor(object); err == nil {
		table.ResourceVersion = l.GetResourceVersion()
		table.Continue = l.GetContinue()
		table.RemainingItemCount = l.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(object); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = append([]metav1.TableColumnDefinition{nameColumn}, c.Columns...)
		table.ColumnDefinitions = append(table.ColumnDefinitions, ageColumn)
	}
	return table, nil
}

func age(created metav1.Time) string {
	if created.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(created.Time))
}
