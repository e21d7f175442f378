package shard

import "testing"

func TestValidateClusterID(t *testing.T) {
	for id, ok := range map[string]bool{"c0": true, "eu-west.1_a": true, "": false, "a/b": false, "a b": false,
		"0123456789012345678901234567890123456789012345678901234567890123":  true,
		"01234567890123456789012345678901234567890123456789012345678901234": false} {
		if err := validateClusterID(id); (err == nil) != ok {
			t.Errorf("validateClusterID(%q) = %v", id, err)
		}
	}
}
