package nftables

// CheckKernel exposes checkKernel to the tests.
var CheckKernel = checkKernel
