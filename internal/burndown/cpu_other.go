//go:build !unix

package burndown

import "time"

// ProcessCPU is the CPU time this process has used: not known here, 0.
func ProcessCPU() time.Duration { return 0 }

// ChildrenCPU is the CPU time of this process's children: not known here, 0.
func ChildrenCPU() time.Duration { return 0 }
