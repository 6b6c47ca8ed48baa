module github.com/dtsched/dts/client

go 1.26.8

require (
	github.com/dtsched/dts/internal v0.1.0
	go.uber.org/goleak v1.3.0
)
