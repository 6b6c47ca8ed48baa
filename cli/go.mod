module github.com/dtsched/dts/cli

go 1.26.8

require (
	github.com/dtsched/dts/client v0.1.0
	github.com/spf13/cobra v1.10.2
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/dtsched/dts/internal v0.1.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)

replace (
	github.com/dtsched/dts/client => ../client
	github.com/dtsched/dts/internal => ../internal
)
