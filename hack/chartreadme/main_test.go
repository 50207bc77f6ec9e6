package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValueRows(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  string
		want    []row
		wantErr string
	}{
		{
			name: "a section's keys are documented one by one, a documented mapping is one value",
			values: `
image:
  # -- Registry of the image.
  registry: kruntimes.io
# -- Resources of the container,
# continued on the next line.
resources:
  requests:
    cpu: 250m
`,
			want: []row{
				{key: "image.registry", kind: "string", defaultValue: `"kruntimes.io"`, description: "Registry of the image."},
				{key: "resources", kind: "object", defaultValue: `{"requests":{"cpu":"250m"}}`, description: "Resources of the container, continued on the next line."},
			},
		},
		{
			name: "empty lists, empty mappings and nulls are values",
			values: `
# -- Tolerations.
tolerations: []
# -- Affinity.
affinity: {}
# -- maxUnavailable.
maxUnavailable: null
# -- Replicas.
replicas: 1
`,
			want: []row{
				{key: "tolerations", kind: "list", defaultValue: "[]", description: "Tolerations."},
				{key: "affinity", kind: "object", defaultValue: "{}", description: "Affinity."},
				{key: "maxUnavailable", kind: "null", defaultValue: "null", description: "maxUnavailable."},
				{key: "replicas", kind: "int", defaultValue: "1", description: "Replicas."},
			},
		},
		{
			name: "a value with a plain comment is undocumented",
			values: `
tls:
  # The type.
  type: helm
  # -- Days.
  days: 1
nodeSelector: {}
`,
			wantErr: "values without a \"# -- \" description: tls.type, nodeSelector",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := valueRows([]byte(tc.values))
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, rows)
		})
	}
}

func TestReplaceTable(t *testing.T) {
	readme := "# chart\n" + beginMarker + "\nold\n" + endMarker + "\nafter\n"
	got, err := replaceTable([]byte(readme), "| new |\n")
	require.NoError(t, err)
	assert.Equal(t, "# chart\n"+beginMarker+"\n| new |\n"+endMarker+"\nafter\n", string(got))

	_, err = replaceTable([]byte("# no markers\n"), "| new |\n")
	assert.Error(t, err)
}
