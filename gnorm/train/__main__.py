from gnorm.train.run import cli

if __name__ == '__main__':
    cli()
