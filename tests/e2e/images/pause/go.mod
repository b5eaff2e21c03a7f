module captcha-solver/e2e/pause

go 1.22
